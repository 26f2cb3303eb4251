// The size of an image in patches, as the vision encoder and the position ids
// see it (the reference's image_grid_thw row).
#pragma once
#include <cstdint>

namespace qvl {

struct ImageGrid {
  int64_t t = 1;  // temporal patches (1 for a still image)
  int64_t h = 0;  // patch rows
  int64_t w = 0;  // patch columns
  int64_t patches() const { return t * h * w; }
  // Tokens the image costs in the prompt: one per merge_size x merge_size window.
  int64_t tokens(int64_t merge_size) const { return patches() / (merge_size * merge_size); }
};

}  // namespace qvl
