// Where each patch of each image sits, in the forms the vision tower consumes:
// which rows of the learned 2-D position table to blend (and how much), the
// 2-D rotary angles, and the attention windows. Patches are in the processor's
// order: t, then merge windows row by row, then the patches inside a window.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "qvl/model/config.h"
#include "qvl/model/grid.h"

namespace qvl {

struct VisionPositions {
  at::Tensor pos_index;   // [4, N] int64: the table rows of the four corners around each patch
  at::Tensor pos_weight;  // [4, N] float32: their bilinear weights
  at::Tensor rope_cos;    // [N, head_dim] float32: row angles, column angles, repeated once
  at::Tensor rope_sin;    // [N, head_dim] float32
  std::vector<int64_t> seq_lens;  // patches per image frame; a patch attends only within its own
};

// Throws qvl::Error for an empty list or a grid the merge windows cannot tile.
VisionPositions vision_positions(const VisionConfig& cfg, const std::vector<ImageGrid>& grids);

}  // namespace qvl
