// Antialiased bicubic resampling of 8-bit RGB, bit for bit what PyTorch's
// interpolate(mode="bicubic", antialias=True) computes on uint8 images (what
// torchvision's resize runs for the reference processor).
#pragma once
#include <cstdint>
#include <vector>

#include "qvl/image/rgb_image.h"

namespace qvl {

RgbImage resize_bicubic_antialias(const RgbImage& in, int64_t out_width, int64_t out_height);

// The fixed-point filter of one axis, exposed for tests: output i reads inputs
// first[i] .. first[i] + count[i] - 1 with weights[i * taps + k] / 2^precision.
struct ResampleWeights {
  int64_t taps = 0;
  int precision = 0;
  std::vector<int64_t> first, count;
  std::vector<int16_t> weights;
};
ResampleWeights bicubic_antialias_weights(int64_t in_size, int64_t out_size);

}  // namespace qvl
