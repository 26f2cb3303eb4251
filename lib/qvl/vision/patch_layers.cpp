#include "qvl/vision/patch_layers.h"

#include <ATen/ATen.h>
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "qvl/error.h"
#include "qvl/kernels/cpu.h"
#include "qvl/kernels/vision_ops.h"
#include "qvl/tensor/linear.h"
#include "qvl/vision/positions.h"
#include "qvl/vision/vision_blocks.h"

namespace qvl {
namespace {

// The reference's vision LayerNorms.
constexpr float kLayerNormEps = 1e-6f;

}  // namespace

PatchEmbedding::PatchEmbedding(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params) {
  const int64_t inputs = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
  weight_ = vision_param(params, "patch_embed.proj.weight", {cfg.hidden_size, inputs});
  bias_ = vision_param(params, "patch_embed.proj.bias", {cfg.hidden_size});
  table_ = vision_param(params, "pos_embed.weight", {cfg.num_position_embeddings, cfg.hidden_size}).contiguous();
  if (table_.scalar_type() != weight_.scalar_type())
    throw Error(fmt::format("vision module: pos_embed.weight is {} but patch_embed.proj.weight is {}",
                            c10::toString(table_.scalar_type()), c10::toString(weight_.scalar_type())));
}

at::Tensor PatchEmbedding::run(const at::Tensor& pixel_values, const VisionPositions& pos) const {
  at::Tensor patches = tensor::linear(pixel_values.to(weight_.scalar_type()).contiguous(), weight_, bias_);
  const int64_t n = pos.pos_index.size(1);
  if (patches.size(0) != n || pos.pos_index.size(0) != 4 || pos.pos_index.sizes() != pos.pos_weight.sizes())
    throw Error(fmt::format("patch embedding: {} patches but positions for {}", patches.size(0), n));
  // One fused pass: the same float32 sums ATen's index_select, multiply and
  // adds make, without their ~77 MB of temporaries for a 640x480 image (each
  // a fresh allocation; on a VM that charges for first page touches this
  // step took 0.17-0.20 s, now 0.03 s: docs/PERFORMANCE.md).
  const at::Tensor corners = pos.pos_index.contiguous(), weights = pos.pos_weight.contiguous();
  kernels::add_position_embedding(activation_storage(patches), patches.data_ptr(), table_.data_ptr(),
                                  table_.size(0), corners.data_ptr<int64_t>(), weights.data_ptr<float>(), n,
                                  patches.size(1));
  return patches;
}

PatchMerger::PatchMerger(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params,
                         const std::string& prefix, bool norm_after_join, const Int8Weights* int8)
    : hidden_(cfg.hidden_size),
      joined_(cfg.hidden_size * cfg.spatial_merge_size * cfg.spatial_merge_size),
      norm_after_join_(norm_after_join) {
  const int64_t norm_width = norm_after_join ? joined_ : hidden_;
  norm_weight_ = layer_norm_floats(vision_param(params, prefix + "norm.weight", {norm_width}));
  norm_bias_ = layer_norm_floats(vision_param(params, prefix + "norm.bias", {norm_width}));
  fc1_weight_ = vision_linear_weight(params, int8, prefix + "linear_fc1.weight", joined_, joined_);
  fc1_bias_ = vision_param(params, prefix + "linear_fc1.bias", {joined_});
  fc2_weight_ = vision_linear_weight(params, int8, prefix + "linear_fc2.weight", cfg.out_hidden_size, joined_);
  fc2_bias_ = vision_param(params, prefix + "linear_fc2.bias", {cfg.out_hidden_size});
}

at::Tensor PatchMerger::run(const at::Tensor& x) const {
  if (x.dim() != 2 || x.size(1) != hidden_ || x.size(0) * hidden_ % joined_ != 0)
    throw Error(fmt::format("patch merger: input is {}, expected [N, {}] with N a multiple of {}",
                            fmt::join(x.sizes().vec(), "x"), hidden_, joined_ / hidden_));
  // The LayerNorm through the vision kernels (ATen's bf16 layer_norm took
  // ~8 ms on one thread for a 640x480 image's 300 rows, the kernel 0.5 ms).
  const at::Tensor in = x.contiguous();
  const int64_t width = norm_after_join_ ? joined_ : hidden_;
  at::Tensor joined = at::empty({x.size(0) * hidden_ / joined_, joined_}, x.options());
  // Without a residual to add the kernel only reads x.
  kernels::add_layer_norm(activation_storage(in), const_cast<void*>(in.data_ptr()), nullptr, joined.data_ptr(),
                          norm_weight_.data(), norm_bias_.data(), in.numel() / width, width, kLayerNormEps);
  at::Tensor inner = vision_linear(joined, fc1_weight_, fc1_bias_);
  // libtorch sends a bf16 GELU to oneDNN where it sends bf16 matmuls; below
  // the avx512 tier compute it in float32 (what ATen's own bf16 GELU does).
  if (inner.scalar_type() == at::kBFloat16 && !kernels::aten_bf16_matmul_is_fast())
    inner = at::gelu(inner.to(at::kFloat)).to(at::kBFloat16);
  else
    at::gelu_(inner);
  return vision_linear(inner, fc2_weight_, fc2_bias_);
}

}  // namespace qvl
