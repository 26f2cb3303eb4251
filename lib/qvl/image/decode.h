// PNG and JPEG files to 8-bit RGB, pixel for pixel what the reference gets from
// PIL: Image.open, ImageOps.exif_transpose, convert("RGB").
//
// Untrusted input: the format comes from the magic bytes, every size is checked
// against ImageLimits before pixel memory is allocated, and any decoder error or
// truncation becomes a one-line qvl::Error naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "qvl/image/rgb_image.h"

namespace qvl {

struct ImageLimits {
  int64_t max_pixels = 50'000'000;         // declared width * height
  int64_t max_file_bytes = 256ll << 20;    // only read by decode_image_file
};

enum class ImageFormat { Unknown, Png, Jpeg };
ImageFormat detect_image_format(const uint8_t* data, size_t size);
const char* image_format_name(ImageFormat format);  // "png", "jpeg", "unknown"

// `name` is only used in error messages (usually the file path).
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits = {});
RgbImage decode_image_file(const std::string& path, const ImageLimits& limits = {});

}  // namespace qvl
