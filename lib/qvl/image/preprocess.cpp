#include "qvl/image/preprocess.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "qvl/error.h"
#include "qvl/image/resize.h"

namespace qvl {
namespace {

constexpr int64_t kChannels = 3;
constexpr int64_t kMaxAspectRatio = 200;

void check_config(const PreprocessorConfig& cfg) {
  if (cfg.patch_size <= 0 || cfg.merge_size <= 0 || cfg.temporal_patch_size <= 0)
    throw Error(fmt::format("preprocessor: patch_size {}, merge_size {} and temporal_patch_size {} must be positive",
                            cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size));
  for (int c = 0; c < 3; ++c)
    if (!(cfg.image_std[c] != 0.0f))
      throw Error(fmt::format("preprocessor: image_std[{}] is {}, it must be non-zero", c, cfg.image_std[c]));
}

// Values in a patch row: C * T * P * P.
int64_t patch_dim_of(const PreprocessorConfig& cfg) {
  return kChannels * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
}

}  // namespace

ResizedSize smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels) {
  if (height <= 0 || width <= 0) throw Error(fmt::format("smart_resize: image size {}x{} is empty", width, height));
  if (factor <= 0) throw Error(fmt::format("smart_resize: factor {} must be positive", factor));
  if (min_pixels > max_pixels)
    throw Error(fmt::format("smart_resize: min_pixels {} is larger than max_pixels {}", min_pixels, max_pixels));
  if (std::max(height, width) > kMaxAspectRatio * std::min(height, width))
    throw Error(fmt::format("image is {}x{}: aspect ratio {:.1f} is over the limit of {}", width, height,
                            double(std::max(height, width)) / double(std::min(height, width)), kMaxAspectRatio));

  // The reference computes in Python floats; nearbyint rounds half to even like Python's round().
  const double h = double(height), w = double(width), f = double(factor);
  int64_t h_bar = int64_t(std::nearbyint(h / f)) * factor;
  int64_t w_bar = int64_t(std::nearbyint(w / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / double(max_pixels));
    h_bar = std::max(factor, int64_t(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, int64_t(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(double(min_pixels) / (h * w));
    h_bar = int64_t(std::ceil(h * beta / f)) * factor;
    w_bar = int64_t(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

ImageGrid image_grid_for(int64_t height, int64_t width, const PreprocessorConfig& cfg) {
  check_config(cfg);
  const ResizedSize size =
      smart_resize(height, width, cfg.patch_size * cfg.merge_size, cfg.min_pixels, cfg.max_pixels);
  return ImageGrid{1, size.height / cfg.patch_size, size.width / cfg.patch_size};
}

namespace {

// The patch grid of an image already resized to whole merge windows; throws otherwise.
ImageGrid patch_grid(const RgbImage& resized, const PreprocessorConfig& cfg) {
  check_config(cfg);
  const int64_t p = cfg.patch_size, m = cfg.merge_size;
  if (resized.width <= 0 || resized.height <= 0 || resized.width % (p * m) != 0 || resized.height % (p * m) != 0)
    throw Error(fmt::format("patchify: image {}x{} is not a multiple of {} on both sides", resized.width,
                            resized.height, p * m));
  return ImageGrid{1, resized.height / p, resized.width / p};
}

// Writes value(channel, byte) of every pixel of `resized` in patch-row order
// (preprocess.h, patchify_u8) from `out` on.
template <class T, class Value>
void patchify_into(const RgbImage& resized, const PreprocessorConfig& cfg, const ImageGrid& g, T* out, Value value) {
  const int64_t p = cfg.patch_size, m = cfg.merge_size, t = cfg.temporal_patch_size;
  for (int64_t block_y = 0; block_y < g.h / m; ++block_y)
    for (int64_t block_x = 0; block_x < g.w / m; ++block_x)
      for (int64_t in_y = 0; in_y < m; ++in_y)
        for (int64_t in_x = 0; in_x < m; ++in_x) {
          const int64_t x0 = (block_x * m + in_x) * p, y0 = (block_y * m + in_y) * p;
          for (int64_t c = 0; c < kChannels; ++c)
            for (int64_t frame = 0; frame < t; ++frame)  // a still image is its own T frames
              for (int64_t y = 0; y < p; ++y)
                for (int64_t x = 0; x < p; ++x) *out++ = value(c, resized.at(x0 + x, y0 + y)[c]);
        }
}

}  // namespace

std::vector<uint8_t> patchify_u8(const RgbImage& resized, const PreprocessorConfig& cfg, ImageGrid* grid) {
  const ImageGrid g = patch_grid(resized, cfg);
  std::vector<uint8_t> out(size_t(g.patches() * patch_dim_of(cfg)));
  patchify_into(resized, cfg, g, out.data(), [](int64_t, uint8_t v) { return v; });
  if (grid) *grid = g;
  return out;
}

PatchifiedImage preprocess_image(const RgbImage& img, const PreprocessorConfig& cfg) {
  check_config(cfg);
  const ResizedSize size =
      smart_resize(img.height, img.width, cfg.patch_size * cfg.merge_size, cfg.min_pixels, cfg.max_pixels);
  // An image already of the chosen size is used as it is (the resize would return a copy).
  RgbImage scaled;
  if (size.width != img.width || size.height != img.height)
    scaled = resize_bicubic_antialias(img, size.width, size.height);
  const RgbImage& resized = scaled.pixels.empty() ? img : scaled;

  PatchifiedImage result;
  result.grid = patch_grid(resized, cfg);
  result.resized_width = size.width;
  result.resized_height = size.height;
  result.patch_dim = patch_dim_of(cfg);

  // Only 256 values per channel exist, so normalize through a table.
  float table[kChannels][256];
  for (int64_t c = 0; c < kChannels; ++c)
    for (int v = 0; v < 256; ++v)
      table[c][v] = (float(v) / 255.0f - cfg.image_mean[size_t(c)]) / cfg.image_std[size_t(c)];
  result.pixel_values.resize(size_t(result.grid.patches() * result.patch_dim));
  patchify_into(resized, cfg, result.grid, result.pixel_values.data(),
                [&table](int64_t c, uint8_t v) { return table[c][v]; });
  return result;
}

}  // namespace qvl
