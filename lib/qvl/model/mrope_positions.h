// Multimodal rotary position ids (t, h, w per token) as the reference's
// get_rope_index assigns them: text advances all three axes together; an
// image's tokens take (frame, row, column) of its merged grid, offset by the
// position where the image starts; text after an image continues from the
// largest position used so far + 1.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "qvl/model/grid.h"

namespace qvl {

struct MropePositions {
  std::vector<std::array<int64_t, 3>> ids;  // one (t, h, w) per token
  int64_t next = 0;                         // where the next token continues
};

// Positions for `tokens` appended after a prefix whose next position is
// `start`. Each maximal run of image_token_id is one image and takes the next
// grid in `grids` (its length must be the grid's merged token count).
MropePositions mrope_positions(const std::vector<int32_t>& tokens, const std::vector<ImageGrid>& grids,
                               int64_t merge_size, int32_t image_token_id, int64_t start = 0);

}  // namespace qvl
