// A decoded picture: 8-bit RGB, rows top to bottom, channels interleaved (HWC).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qvl {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3 bytes
  // The size in the file, when the decoder shrank the image while decoding it
  // (a JPEG's DCT scaling, DecodeRequest::target_max_pixels); 0 when it did not.
  int64_t unscaled_width = 0, unscaled_height = 0;

  const uint8_t* at(int64_t x, int64_t y) const { return &pixels[size_t((y * width + x) * 3)]; }
  uint8_t* at(int64_t x, int64_t y) { return &pixels[size_t((y * width + x) * 3)]; }
};

}  // namespace qvl
