// The reference image processor (transformers' Qwen2VLImageProcessor, which
// Qwen3-VL uses): pick a size, resize, cut into patches, normalize.
#pragma once
#include <cstdint>
#include <vector>

#include "qvl/image/rgb_image.h"
#include "qvl/io/huge_pages.h"
#include "qvl/model/config.h"
#include "qvl/model/grid.h"

namespace qvl {

struct ResizedSize {
  int64_t height, width;
};

// The size the processor resizes to: both sides multiples of `factor`
// (patch_size * merge_size), area within [min_pixels, max_pixels] where the
// rounding allows, aspect ratio kept. Throws if the aspect ratio exceeds 200
// (as the reference does) or if min_pixels > max_pixels (which it lets pass).
ResizedSize smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels, int64_t max_pixels);

struct PatchifiedImage {
  ImageGrid grid;
  int64_t resized_width = 0, resized_height = 0;
  // [grid.patches(), patch_dim], normalized; 7.4 MB for a 640x480 image, in
  // huge pages (io/huge_pages.h says why).
  std::vector<float, HugePageAllocator<float>> pixel_values;
  int64_t patch_dim = 0;            // C * T * P * P
};

// Cuts an already resized image into patch rows, before normalization, in the
// reference order: merge windows of merge_size x merge_size patches are
// consecutive rows; each row is channel, then the T copies of the frame, then
// the P x P pixels. `resized` must have sides that are multiples of
// patch_size * merge_size.
std::vector<uint8_t> patchify_u8(const RgbImage& resized, const PreprocessorConfig& cfg, ImageGrid* grid);

// smart_resize + resize_bicubic_antialias + patchify_u8 + (x/255 - mean) / std.
PatchifiedImage preprocess_image(const RgbImage& img, const PreprocessorConfig& cfg);

// The grid an image of this size would get, without touching pixels.
ImageGrid image_grid_for(int64_t height, int64_t width, const PreprocessorConfig& cfg);

}  // namespace qvl
