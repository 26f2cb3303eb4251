#include "qvl/vision/vision_encoder.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <mutex>

#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/vision/patch_layers.h"
#include "qvl/vision/positions.h"
#include "qvl/vision/vision_blocks.h"

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
auto run_module(const std::string& path, Fn&& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw Error(fmt::format("vision module {} failed: {}", path, what.substr(0, what.find('\n'))));
  }
}

}  // namespace

struct VisionEncoder::Impl {
  VisionConfig cfg;
  at::ScalarType dtype;
  std::string path;
  torch::jit::Module module;
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

  VisionPositions positions_for(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids) const {
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
  impl_->cfg = cfg.vision;
  impl_->dtype = opts.dtype;
  configure_executor_once();
  // A module made just now is used as made; one found in the cache is loaded.
  torch::jit::Module built;
  const VisionModuleFile file = ensure_vision_module(model_dir, ckpt, opts, /*force=*/false, &built);
  impl_->path = file.path;
  if (file.built) {
    impl_->module = built;
  } else {
    try {
      impl_->module = torch::jit::load(impl_->path, c10::Device(c10::kCPU));
    } catch (const c10::Error& e) {
      throw Error(fmt::format("cannot load vision module {} ({}); rebuild it with `qvl export --force`", impl_->path,
                              e.what_without_backtrace()));
    }
  }
  impl_->module.eval();
  if (opts.native_blocks) {
    std::map<std::string, at::Tensor> params;
    for (const auto& p : impl_->module.named_parameters()) params[p.name] = p.value;
    impl_->embedding = std::make_unique<PatchEmbedding>(impl_->cfg, params);
    impl_->blocks = std::make_unique<VisionBlocks>(impl_->cfg, params);
    for (size_t i = 0; i < impl_->cfg.deepstack_visual_indexes.size(); ++i)
      impl_->deepstack_mergers.emplace_back(impl_->cfg, params, fmt::format("deepstack_merger_list.{}.", i), true);
    impl_->merger = std::make_unique<PatchMerger>(impl_->cfg, params, "merger.", false);
  }
}

VisionEncoder::~VisionEncoder() = default;

const std::string& VisionEncoder::module_path() const { return impl_->path; }
at::ScalarType VisionEncoder::dtype() const { return impl_->dtype; }

VisionFeatures VisionEncoder::encode(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids) {
  VisionPositions pos = impl_->positions_for(pixel_values, grids);
  // No-grad rather than inference mode: callers may still update the features in place.
  at::NoGradGuard no_autograd;
  auto result = run_module(impl_->path, [&] {
    if (impl_->blocks) return impl_->forward_native(pixel_values.contiguous(), pos);
    return impl_->module.forward({pixel_values.contiguous(), pos.pos_index, pos.pos_weight, pos.rope_cos,
                                  pos.rope_sin, c10::List<int64_t>(pos.seq_lens)});
  });
  auto outputs = result.toTuple()->elements();
  VisionFeatures features;
  features.embeds = outputs.at(0).toTensor();
  for (const auto& t : outputs.at(1).toTensorVector()) features.deepstack.push_back(t);
  if (features.deepstack.size() != impl_->cfg.deepstack_visual_indexes.size())
    throw Error(fmt::format("vision module {} gives {} deepstack features but config.json lists {}", impl_->path,
                            features.deepstack.size(), impl_->cfg.deepstack_visual_indexes.size()));
  return features;
}

at::Tensor VisionEncoder::block_input(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids) {
  VisionPositions pos = impl_->positions_for(pixel_values, grids);
  at::NoGradGuard no_autograd;
  return run_module(impl_->path, [&] {
    return impl_->module.get_method("block_input")({pixel_values.contiguous(), pos.pos_index, pos.pos_weight})
        .toTensor();
  });
}

}  // namespace qvl
