#include "qvl/vision/vision_encoder.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <map>
#include <mutex>
#include <optional>

#include "qvl/decoder/quant_cache.h"  // quant_cache_dir
#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/checkpoint_layout.h"  // vision_int8_weight_names
#include "qvl/tensor/aten_backends.h"
#include "qvl/vision/module_builder.h"
#include "qvl/vision/patch_layers.h"
#include "qvl/vision/positions.h"
#include "qvl/vision/vision_blocks.h"
#include "qvl/vision/vision_int8.h"

namespace qvl {
namespace {

// TorchScript's default profiling executor specializes the graph to the
// shapes of its first calls and profiles and re-optimizes again for each new
// image size; the legacy executor optimizes once, on the first call (0.3 s of
// CPU for the 2B tower). The graph is a chain of matmuls, layer norms and
// attention that the optimizer cannot speed up (measured: same steady-state
// time), so optimization is switched off and no call pays for it. Process-wide;
// qvl runs no other TorchScript.
void configure_executor_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::jit::getProfilingMode() = false;
    torch::jit::getExecutorMode() = false;
    torch::jit::setGraphExecutorOptimize(false);
  });
}

// TorchScript errors carry a multi-line traceback; qvl reports one line.
template <class Fn>
auto run_module(Fn&& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw Error(fmt::format("vision module failed: {}", what.substr(0, what.find('\n'))));
  }
}

}  // namespace

struct VisionEncoder::Impl {
  const Checkpoint* ckpt = nullptr;
  ModelConfig model_cfg;  // what build_vision_module reads; the tower's part is .vision
  at::ScalarType dtype;
  // Made at construction, except with int8 vision, where only block_input
  // and the TorchScript forward need it and make it at their first call.
  std::optional<torch::jit::Module> module;
  // The module again in float32, for the TorchScript forward of a bf16
  // encoder where ATen's bf16 is inexact (tensor/aten_backends.h); made at
  // its first use, which only the tests and `qvl export` reach.
  std::optional<torch::jit::Module> widened;
  // int8 vision: the linears' int8 weights, mapped from the cache file.
  std::unique_ptr<kernels::Int8Cache> int8;
  // The native tower (null: the module's forward runs everything): the
  // module's parameters driven by qvl's kernels, the TorchScript forward kept
  // as the reference the tests hold them to.
  std::unique_ptr<PatchEmbedding> embedding;
  std::unique_ptr<VisionBlocks> blocks;
  std::vector<PatchMerger> deepstack_mergers;
  std::unique_ptr<PatchMerger> merger;

  c10::IValue forward_native(const at::Tensor& pixel_values, const VisionPositions& pos) {
    std::vector<at::Tensor> taps;
    const at::Tensor x = blocks->run(embedding->run(pixel_values, pos), pos, &taps);
    std::vector<at::Tensor> deepstack;
    for (size_t i = 0; i < taps.size() && i < deepstack_mergers.size(); ++i)
      deepstack.push_back(deepstack_mergers[i].run(taps[i]));
    return c10::ivalue::Tuple::create({merger->run(x), c10::IValue(deepstack)});
  }

  // The module is made here, in memory, every time, not read back from a
  // file: compiling its TorchScript source takes ~0.05 s for the 2B tower,
  // and its bf16 parameters are views of the mapped checkpoint, page-cache
  // pages the kernel can share and reclaim. Loading the file `qvl export`
  // writes copies every tensor into fresh anonymous memory instead: 0.5 s on a
  // Zen 4 VM, 1.7-3.3 s on a Zen 5 one, where each new 4 KB page costs ~7 us
  // (docs/PERFORMANCE.md, "Vision weights straight from the checkpoint").
  torch::jit::Module& script() {
    if (!module) {
      module = build_vision_module(model_cfg, *ckpt, dtype);
      module->eval();
    }
    return *module;
  }

  // The module whose forward runs, and whether its outputs need rounding to dtype.
  torch::jit::Module& forward_module(bool& round_outputs) {
    round_outputs = dtype == at::kBFloat16 && tensor::aten_bf16_is_inexact();
    if (!round_outputs) return script();
    if (!widened) {
      widened = build_vision_module(model_cfg, *ckpt, at::kFloat);
      widened->eval();
    }
    return *widened;
  }

  VisionPositions positions_for(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids) const {
    const VisionConfig& cfg = model_cfg.vision;
    const int64_t row = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
    VisionPositions pos = vision_positions(cfg, grids);
    const int64_t patches = pos.pos_index.size(1);
    if (pixel_values.dim() != 2 || pixel_values.size(0) != patches || pixel_values.size(1) != row ||
        pixel_values.scalar_type() != at::kFloat)
      throw Error(fmt::format("vision encoder: pixel_values is {} {}, expected float [{}, {}] for the image grids",
                              c10::toString(pixel_values.scalar_type()), fmt::join(pixel_values.sizes().vec(), "x"),
                              patches, row));
    return pos;
  }
};

VisionEncoder::VisionEncoder(const std::string& model_dir, const ModelConfig& cfg, const Checkpoint& ckpt,
                             const VisionOptions& opts)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.ckpt = &ckpt;
  d.model_cfg = cfg;
  d.dtype = opts.dtype;
  tensor::configure_aten_backends();
  configure_executor_once();
  const bool int8 = opts.native_blocks && opts.quant != WeightQuant::None;
  std::map<std::string, at::Tensor> params;
  if (int8) {
    // The linears come from the int8 cache and the rest straight from the
    // checkpoint, as the module would hold them; the module, whose bf16
    // linears are not needed, is not made.
    const std::string dir = quant_cache_dir(model_dir, ckpt.fingerprint(), opts.cache_dir, opts.on_note);
    d.int8 = load_vision_int8_cache(cfg, ckpt, dir, opts.on_note);
    params = vision_parameters(cfg, ckpt, opts.dtype, vision_int8_weight_names(cfg.vision));
  } else {
    d.script();
    if (!opts.native_blocks) return;
    for (const auto& p : d.module->named_parameters()) params[p.name] = p.value;
  }
  const Int8Weights* weights = d.int8 ? &d.int8->matrices() : nullptr;
  const VisionConfig& vision = cfg.vision;
  d.embedding = std::make_unique<PatchEmbedding>(vision, params);
  d.blocks = std::make_unique<VisionBlocks>(vision, params, weights);
  for (size_t i = 0; i < vision.deepstack_visual_indexes.size(); ++i)
    d.deepstack_mergers.emplace_back(vision, params, fmt::format("deepstack_merger_list.{}.", i), true, weights);
  d.merger = std::make_unique<PatchMerger>(vision, params, "merger.", false, weights);
}

VisionEncoder::~VisionEncoder() = default;

at::ScalarType VisionEncoder::dtype() const { return impl_->dtype; }

VisionFeatures VisionEncoder::encode(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids) {
  VisionPositions pos = impl_->positions_for(pixel_values, grids);
  // No-grad rather than inference mode: callers may still update the features in place.
  at::NoGradGuard no_autograd;
  bool round_outputs = false;
  auto result = run_module([&] {
    if (impl_->blocks) return impl_->forward_native(pixel_values.contiguous(), pos);
    return impl_->forward_module(round_outputs)
        .forward({pixel_values.contiguous(), pos.pos_index, pos.pos_weight, pos.rope_cos, pos.rope_sin,
                  c10::List<int64_t>(pos.seq_lens)});
  });
  const auto as_dtype = [&](const at::Tensor& t) { return round_outputs ? t.to(impl_->dtype) : t; };
  auto outputs = result.toTuple()->elements();
  VisionFeatures features;
  features.embeds = as_dtype(outputs.at(0).toTensor());
  for (const auto& t : outputs.at(1).toTensorVector()) features.deepstack.push_back(as_dtype(t));
  const size_t expected = impl_->model_cfg.vision.deepstack_visual_indexes.size();
  if (features.deepstack.size() != expected)
    throw Error(fmt::format("vision module gives {} deepstack features but config.json lists {}",
                            features.deepstack.size(), expected));
  return features;
}

at::Tensor VisionEncoder::block_input(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids) {
  VisionPositions pos = impl_->positions_for(pixel_values, grids);
  at::NoGradGuard no_autograd;
  bool round_output = false;
  at::Tensor x = run_module([&] {
    return impl_->forward_module(round_output)
        .get_method("block_input")({pixel_values.contiguous(), pos.pos_index, pos.pos_weight})
        .toTensor();
  });
  return round_output ? x.to(impl_->dtype) : x;
}

}  // namespace qvl
