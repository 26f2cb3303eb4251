// The layers at the two ends of the vision tower, run natively like the
// blocks between them (vision_blocks.h), with the TorchScript module's
// parameters: the patch embedding before the first block and the patch
// mergers after the last (the main one) and after each deepstack layer.
// Their matmuls go through tensor/linear.h, so they are fast on every CPU tier.
#pragma once
#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "qvl/model/config.h"
#include "qvl/vision/vision_blocks.h"  // Int8Weights

namespace qvl {

struct VisionPositions;

class PatchEmbedding {
 public:
  // params by the module's names (patch_embed.proj.*, pos_embed.weight).
  PatchEmbedding(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params);
  // pixel_values [N, C·T·P·P] float32 → the first block's input [N, hidden]:
  // each patch's linear embedding plus its position embedding, blended from
  // four table rows in float32.
  at::Tensor run(const at::Tensor& pixel_values, const VisionPositions& pos) const;

 private:
  at::Tensor weight_, bias_, table_;
};

class PatchMerger {
 public:
  // prefix: "merger." or "deepstack_merger_list.<i>.". norm_after_join: the
  // deepstack mergers normalize the joined vector, the main one each patch.
  // int8: the linears' int8 matrices by parameter name, or null (as VisionBlocks).
  PatchMerger(const VisionConfig& cfg, const std::map<std::string, at::Tensor>& params, const std::string& prefix,
              bool norm_after_join, const Int8Weights* int8 = nullptr);
  // x [N, hidden] → [N / merge², out_hidden]: each merge window's patches
  // joined into one vector, then LayerNorm, fc1, GELU, fc2.
  at::Tensor run(const at::Tensor& x) const;

 private:
  int64_t hidden_, joined_;
  bool norm_after_join_;
  std::vector<float> norm_weight_, norm_bias_;
  at::Tensor fc1_bias_, fc2_bias_;
  tensor::LinearWeight fc1_weight_, fc2_weight_;
};

}  // namespace qvl
