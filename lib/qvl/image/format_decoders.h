// The per-format decoders behind decode_image (internal to qvl/image).
// Each returns the image as stored, before the EXIF orientation is applied, and
// reports that orientation (1 = as stored) through `orientation`.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "qvl/image/decode.h"

namespace qvl::detail {

RgbImage decode_png(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    int* orientation);
RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     int* orientation);

// Throws the standard "too many pixels" error before anything is allocated.
void check_pixel_limit(int64_t width, int64_t height, const std::string& name, const ImageLimits& limits);

}  // namespace qvl::detail
