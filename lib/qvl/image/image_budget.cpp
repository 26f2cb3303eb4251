#include "qvl/image/image_budget.h"

#include <fmt/core.h>

#include <algorithm>

#include "qvl/error.h"
#include "qvl/image/preprocess.h"

namespace qvl {

int64_t pixels_per_image_token(const PreprocessorConfig& cfg) {
  const int64_t side = cfg.patch_size * cfg.merge_size;
  if (side <= 0) throw Error(fmt::format("preprocessor: patch_size {} x merge_size {} must be positive",
                                         cfg.patch_size, cfg.merge_size));
  return side * side;
}

PreprocessorConfig apply_image_bounds(PreprocessorConfig cfg, const ImageBounds& b) {
  int64_t max_pixels = cfg.max_pixels;
  if (b.max_pixels > 0) max_pixels = std::min(max_pixels, b.max_pixels);
  if (b.min_pixels > max_pixels)
    throw Error(fmt::format("min_pixels {} is larger than max_pixels {}", b.min_pixels, max_pixels));
  if (b.max_image_tokens > 0) {
    const int64_t ppt = pixels_per_image_token(cfg);
    // A budget beyond what any image could be resized to is no bound (and must not overflow).
    if (b.max_image_tokens <= max_pixels / ppt)
      max_pixels = std::max(b.max_image_tokens * ppt, b.min_pixels);  // an explicit min_pixels wins over the budget
  }
  cfg.min_pixels = std::min(b.min_pixels > 0 ? b.min_pixels : cfg.min_pixels, max_pixels);
  cfg.max_pixels = max_pixels;
  return cfg;
}

int64_t image_tokens_for(int64_t height, int64_t width, const PreprocessorConfig& cfg) {
  return image_grid_for(height, width, cfg).tokens(cfg.merge_size);
}

std::optional<int64_t> max_pixels_to_fit(const std::vector<std::pair<int64_t, int64_t>>& sizes,
                                         const PreprocessorConfig& cfg, int64_t available_tokens) {
  const int64_t ppt = pixels_per_image_token(cfg);
  auto total_tokens = [&](int64_t max_pixels) {
    PreprocessorConfig c = cfg;
    c.max_pixels = max_pixels;
    int64_t total = 0;
    for (const auto& [width, height] : sizes) total += image_tokens_for(height, width, c);
    return total;
  };
  if (total_tokens(cfg.max_pixels) <= available_tokens) return cfg.max_pixels;
  // Caps of whole tokens between the minimum and the current bound.
  const int64_t lo_tokens = (cfg.min_pixels + ppt - 1) / ppt, hi_tokens = cfg.max_pixels / ppt;
  auto cap = [&](int64_t tokens) { return std::max(tokens * ppt, cfg.min_pixels); };
  if (lo_tokens > hi_tokens || total_tokens(cap(lo_tokens)) > available_tokens) return std::nullopt;
  // A larger cap never gives an image fewer tokens, so the largest cap that fits is found by bisection.
  int64_t good = lo_tokens, bad = hi_tokens + 1;
  while (bad - good > 1) {
    const int64_t mid = good + (bad - good) / 2;
    (total_tokens(cap(mid)) <= available_tokens ? good : bad) = mid;
  }
  return cap(good);
}

}  // namespace qvl
