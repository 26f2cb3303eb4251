// The vision tower's transformer blocks, run natively: tensor/linear.h for
// the matmuls (oneDNN on the avx512 tier, float32 OpenBLAS on the others) and
// qvl's own kernels for everything between them (kernels/vision_ops.h). Attention goes one head and
// one block of queries at a time, so the [heads, N, N] scores never exist at
// once and each block of them stays in cache between its two matmuls.
//
// The weights are the TorchScript module's parameters (already in the compute
// dtype), or for int8 vision the linears' int8 matrices (vision_int8.h) and
// the rest of the parameters; patch_layers.h runs the patch embedding and the
// mergers the same way.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qvl/kernels/attention.h"
#include "qvl/kernels/quant.h"
#include "qvl/kernels/storage.h"
#include "qvl/model/config.h"
#include "qvl/tensor/linear.h"

namespace qvl {

struct VisionPositions;

// The module parameter `name`, checked to have `shape`; throws qvl::Error
// naming it when it is missing or misshapen.
const at::Tensor& vision_param(const std::map<std::string, at::Tensor>& params, const std::string& name,
                               std::vector<int64_t> shape);

// int8 matrices by module parameter name (an Int8Cache's matrices()), or null.
using Int8Weights = std::map<std::string, kernels::Int8Matrix>;

// The linear weight `name` [rows, cols]: the int8 matrix of that name when
// int8 is given and holds it, else the parameter. Throws qvl::Error naming it
// when it is missing or misshapen.
tensor::LinearWeight vision_linear_weight(const std::map<std::string, at::Tensor>& params, const Int8Weights* int8,
                                          const std::string& name, int64_t rows, int64_t cols);

// The kernels' storage of vision activations: bf16 or float32; throws
// qvl::Error for another dtype.
kernels::Storage activation_storage(const at::Tensor& t);

// A LayerNorm parameter as the kernels take it: float32 whatever its dtype.
std::vector<float> layer_norm_floats(const at::Tensor& t);

// x [L, in] times a weight (dense or int8) plus bias, in x's dtype.
at::Tensor vision_linear(const at::Tensor& x, const tensor::LinearWeight& weight, const at::Tensor& bias);

class VisionBlocks {
 public:
  // params: by the module's names ("blocks.3.attn.qkv.weight", ...); int8:
  // the linears' int8 matrices by the same names (they must outlive the
  // blocks; such weights need not be in params), which also makes attention's
  // scores int8 (attention_scores). Throws qvl::Error naming the first missing
  // or misshapen one.
  VisionBlocks(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params,
               const Int8Weights* int8 = nullptr);

  // x: [N, hidden] block input. Returns the last block's output and appends
  // the outputs of the deepstack layers to *taps, in layer order.
  at::Tensor run(at::Tensor x, const VisionPositions& pos, std::vector<at::Tensor>* taps) const;

  // Queries per attention task (kernels/attention.h: one block of one head).
  int64_t query_chunk = 512;
  // How attention computes q·k (kernels/attention.h): int8 when the linears
  // are (int8 vision, `--quant int8`), float as the bf16 path otherwise.
  kernels::AttentionScores attention_scores = kernels::AttentionScores::Float;

 private:
  struct Block {
    tensor::LinearWeight qkv_weight, proj_weight, fc1_weight, fc2_weight;
    at::Tensor qkv_bias, proj_bias, fc1_bias, fc2_bias;
    std::vector<float> norm1_weight, norm1_bias, norm2_weight, norm2_bias;
  };
  // One run's activations, made once and reused by every block (see run()).
  struct Buffers {
    at::Tensor normed, qkv, q, k, v, attended, projected, inner, pending, scratch;
  };
  // attended = attention over qkv (both in `b`).
  void attention(Buffers& b, const VisionPositions& pos) const;

  VisionConfig cfg_;
  std::vector<Block> blocks_;
};

}  // namespace qvl
