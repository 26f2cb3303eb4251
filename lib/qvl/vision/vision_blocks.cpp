#include "qvl/vision/vision_blocks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "qvl/error.h"
#include "qvl/kernels/attention.h"
#include "qvl/kernels/vision_ops.h"
#include "qvl/tensor/huge_page_tensor.h"
#include "qvl/tensor/linear.h"
#include "qvl/vision/positions.h"

namespace qvl {
namespace {

// The reference's vision LayerNorms.
constexpr float kLayerNormEps = 1e-6f;

}  // namespace

kernels::Storage activation_storage(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return kernels::Storage::BF16;
  if (t.scalar_type() == at::kFloat) return kernels::Storage::F32;
  throw Error(fmt::format("vision: activations are {}, expected bf16 or float32", c10::toString(t.scalar_type())));
}

std::vector<float> layer_norm_floats(const at::Tensor& t) {
  at::Tensor f = t.to(at::kFloat).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

const at::Tensor& vision_param(const std::map<std::string, at::Tensor>& params, const std::string& name,
                        std::vector<int64_t> shape) {
  auto it = params.find(name);
  if (it == params.end()) throw Error(fmt::format("vision module has no parameter {}", name));
  if (it->second.sizes().vec() != shape)
    throw Error(fmt::format("vision module parameter {} is {}, expected {}", name,
                            fmt::join(it->second.sizes().vec(), "x"), fmt::join(shape, "x")));
  return it->second;
}

tensor::LinearWeight vision_linear_weight(const std::map<std::string, at::Tensor>& params, const Int8Weights* int8,
                                          const std::string& name, int64_t rows, int64_t cols) {
  if (int8) {
    const auto it = int8->find(name);
    if (it != int8->end()) {
      const kernels::Int8Matrix& m = it->second;
      if (m.rows != rows || m.cols != cols)
        throw Error(fmt::format("vision int8 weight {} is {}x{}, expected {}x{}", name, m.rows, m.cols, rows, cols));
      return tensor::LinearWeight(m);
    }
  }
  return vision_param(params, name, {rows, cols});
}

at::Tensor vision_linear(const at::Tensor& x, const tensor::LinearWeight& weight, const at::Tensor& bias) {
  const int64_t rows = weight.int8 ? weight.int8->rows : weight.dense.size(0);
  at::Tensor out = at::empty({x.size(0), rows}, x.options());
  at::Tensor scratch;  // used only where int8 weights are dequantized (no int8 GEMM on the tier)
  tensor::linear_into(out, x, weight, bias, scratch);
  return out;
}

VisionBlocks::VisionBlocks(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params,
                           const Int8Weights* int8)
    : attention_scores(int8 ? kernels::AttentionScores::Int8 : kernels::AttentionScores::Float), cfg_(cfg) {
  if (cfg.hidden_act != "gelu_pytorch_tanh")
    throw Error(fmt::format("config.json: vision hidden_act '{}' is not supported (gelu_pytorch_tanh)",
                            cfg.hidden_act));
  if (cfg.num_heads <= 0 || cfg.hidden_size % cfg.num_heads != 0)
    throw Error(fmt::format("config.json: vision hidden_size {} does not split into {} heads", cfg.hidden_size,
                            cfg.num_heads));
  const int64_t hidden = cfg.hidden_size, inner = cfg.intermediate_size;
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string p = fmt::format("blocks.{}.", i);
    Block b;
    b.qkv_weight = vision_linear_weight(params, int8, p + "attn.qkv.weight", 3 * hidden, hidden);
    b.qkv_bias = vision_param(params, p + "attn.qkv.bias", {3 * hidden});
    b.proj_weight = vision_linear_weight(params, int8, p + "attn.proj.weight", hidden, hidden);
    b.proj_bias = vision_param(params, p + "attn.proj.bias", {hidden});
    b.fc1_weight = vision_linear_weight(params, int8, p + "mlp.linear_fc1.weight", inner, hidden);
    b.fc1_bias = vision_param(params, p + "mlp.linear_fc1.bias", {inner});
    b.fc2_weight = vision_linear_weight(params, int8, p + "mlp.linear_fc2.weight", hidden, inner);
    b.fc2_bias = vision_param(params, p + "mlp.linear_fc2.bias", {hidden});
    b.norm1_weight = layer_norm_floats(vision_param(params, p + "norm1.weight", {hidden}));
    b.norm1_bias = layer_norm_floats(vision_param(params, p + "norm1.bias", {hidden}));
    b.norm2_weight = layer_norm_floats(vision_param(params, p + "norm2.weight", {hidden}));
    b.norm2_bias = layer_norm_floats(vision_param(params, p + "norm2.bias", {hidden}));
    blocks_.push_back(std::move(b));
  }
}

void VisionBlocks::attention(Buffers& b, const VisionPositions& pos) const {
  const int64_t n = b.qkv.size(0), heads = cfg_.num_heads, head_dim = cfg_.hidden_size / heads;
  const kernels::Storage s = activation_storage(b.qkv);
  kernels::split_qkv_rotary(s, b.qkv.data_ptr(), pos.rope_cos.data_ptr<float>(), pos.rope_sin.data_ptr<float>(), n,
                            heads, head_dim, b.q.data_ptr(), b.k.data_ptr(), b.v.data_ptr());

  // One task per (image, head, block of queries), each a fused pass over the
  // image's keys (kernels/attention.h); a task repacks its head's keys and
  // values once, so blocks of query_chunk queries keep that cost small.
  struct Task {
    int64_t start, length, head, query, queries;
  };
  std::vector<Task> tasks;
  int64_t start = 0;
  for (int64_t length : pos.seq_lens) {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t q0 = 0; q0 < length; q0 += query_chunk)
        tasks.push_back({start, length, h, q0, std::min(query_chunk, length - q0)});
    start += length;
  }
  const float scale = 1.0f / std::sqrt(float(head_dim));
  const kernels::AttentionTensors tensors{b.q.data_ptr(), b.k.data_ptr(), b.v.data_ptr(), b.attended.data_ptr(),
                                          n, heads, head_dim, attention_scores};
  at::parallel_for(0, int64_t(tasks.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Task& t = tasks[size_t(i)];
      kernels::attend_block(s, tensors, {t.head, t.start, t.length, t.query, t.queries}, scale);
    }
  });
}

at::Tensor VisionBlocks::run(at::Tensor x, const VisionPositions& pos, std::vector<at::Tensor>* taps) const {
  if (x.dim() != 2 || x.size(1) != cfg_.hidden_size)
    throw Error(fmt::format("vision blocks: input is {}, expected [N, {}]", fmt::join(x.sizes().vec(), "x"),
                            cfg_.hidden_size));
  x = tensor::empty_huge_paged(x.sizes(), x.options()).copy_(x);  // updated in place below
  const kernels::Storage s = activation_storage(x);
  const int64_t n = x.size(0), hidden = cfg_.hidden_size, heads = cfg_.num_heads;
  // Every block's activations live in the same buffers. Allocated per block,
  // the allocator handed the larger ones back to the kernel between blocks
  // and each block faulted them in again (57,800 page faults in one 640x480
  // image's blocks). Huge pages make their first touch cheap too
  // (huge_page_tensor.h).
  const auto buffer = [&](at::IntArrayRef sizes) { return tensor::empty_huge_paged(sizes, x.options()); };
  Buffers b;
  b.normed = buffer({n, hidden});
  b.qkv = buffer({n, 3 * hidden});
  b.q = buffer({heads, n, hidden / heads});
  b.k = buffer(b.q.sizes());
  b.v = buffer(b.q.sizes());
  b.attended = buffer({n, hidden});
  b.projected = buffer({n, hidden});
  b.inner = buffer({n, cfg_.intermediate_size});
  b.pending = buffer({n, hidden});
  bool pending = false;  // b.pending holds the last MLP output, added to x by the next LayerNorm
  const auto& taps_at = cfg_.deepstack_visual_indexes;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& block = blocks_[i];
    kernels::add_layer_norm(s, x.data_ptr(), pending ? b.pending.data_ptr() : nullptr, b.normed.data_ptr(),
                            block.norm1_weight.data(), block.norm1_bias.data(), n, hidden, kLayerNormEps);
    tensor::linear_into(b.qkv, b.normed, block.qkv_weight, block.qkv_bias, b.scratch);
    attention(b, pos);
    tensor::linear_into(b.projected, b.attended, block.proj_weight, block.proj_bias, b.scratch);
    kernels::add_layer_norm(s, x.data_ptr(), b.projected.data_ptr(), b.normed.data_ptr(), block.norm2_weight.data(),
                            block.norm2_bias.data(), n, hidden, kLayerNormEps);
    tensor::linear_into(b.inner, b.normed, block.fc1_weight, block.fc1_bias, b.scratch);
    kernels::gelu_tanh(s, b.inner.data_ptr(), b.inner.numel());
    tensor::linear_into(b.pending, b.inner, block.fc2_weight, block.fc2_bias, b.scratch);
    pending = true;
    const bool tapped = std::find(taps_at.begin(), taps_at.end(), int64_t(i)) != taps_at.end();
    if (tapped || i + 1 == blocks_.size()) {
      x.add_(b.pending);
      pending = false;
      if (tapped) taps->push_back(buffer(x.sizes()).copy_(x));
    }
  }
  return x;
}

}  // namespace qvl
