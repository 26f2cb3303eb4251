#include "qvl/model/mrope_positions.h"

#include <algorithm>

#include "qvl/error.h"

namespace qvl {

MropePositions mrope_positions(const std::vector<int32_t>& tokens, const std::vector<ImageGrid>& grids,
                               int64_t merge_size, int32_t image_token_id, int64_t start) {
  MropePositions out;
  out.ids.reserve(tokens.size());
  int64_t next = start;
  size_t image = 0;
  for (size_t i = 0; i < tokens.size();) {
    if (tokens[i] != image_token_id) {
      out.ids.push_back({next, next, next});
      ++next;
      ++i;
      continue;
    }
    size_t run_end = i;
    while (run_end < tokens.size() && tokens[run_end] == image_token_id) ++run_end;
    if (image >= grids.size()) throw Error("the prompt has more images than image grids");
    const ImageGrid& g = grids[image++];
    const int64_t rows = g.h / merge_size, cols = g.w / merge_size;
    if (int64_t(run_end - i) != g.t * rows * cols)
      throw Error("image " + std::to_string(image) + " has " + std::to_string(run_end - i) +
                  " placeholder tokens but its grid needs " + std::to_string(g.t * rows * cols));
    int64_t largest = next;
    for (int64_t t = 0; t < g.t; ++t)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          out.ids.push_back({next + t, next + r, next + c});
          largest = std::max({largest, next + t, next + r, next + c});
        }
    next = largest + 1;
    i = run_end;
  }
  if (image != grids.size())
    throw Error("got " + std::to_string(grids.size()) + " image grids for " + std::to_string(image) + " images");
  out.next = next;
  return out;
}

}  // namespace qvl
