// The vision tower's transformer blocks, run natively: tensor/linear.h for
// the matmuls (oneDNN on the avx512 tier, float32 OpenBLAS on the others) and
// qvl's own kernels for everything between them (kernels/vision_ops.h). Attention goes one head and
// one block of queries at a time, so the [heads, N, N] scores never exist at
// once and each block of them stays in cache between its two matmuls.
//
// The weights are the TorchScript module's parameters (already in the compute
// dtype); patch_layers.h runs the patch embedding and the mergers the same way.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qvl/model/config.h"

namespace qvl {

struct VisionPositions;

// The module parameter `name`, checked to have `shape`; throws qvl::Error
// naming it when it is missing or misshapen.
const at::Tensor& vision_param(const std::map<std::string, at::Tensor>& params, const std::string& name,
                               std::vector<int64_t> shape);

class VisionBlocks {
 public:
  // params: by the module's names ("blocks.3.attn.qkv.weight", ...). Throws
  // qvl::Error naming the first missing or misshapen one.
  VisionBlocks(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params);

  // x: [N, hidden] block input. Returns the last block's output and appends
  // the outputs of the deepstack layers to *taps, in layer order.
  at::Tensor run(at::Tensor x, const VisionPositions& pos, std::vector<at::Tensor>* taps) const;

  // Queries per attention task (kernels/attention.h: one block of one head).
  int64_t query_chunk = 512;

 private:
  struct Block {
    at::Tensor qkv_weight, qkv_bias, proj_weight, proj_bias;
    at::Tensor fc1_weight, fc1_bias, fc2_weight, fc2_bias;
    std::vector<float> norm1_weight, norm1_bias, norm2_weight, norm2_bias;
  };
  at::Tensor attention(const at::Tensor& qkv, const VisionPositions& pos) const;

  VisionConfig cfg_;
  std::vector<Block> blocks_;
};

}  // namespace qvl
