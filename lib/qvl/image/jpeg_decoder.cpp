// JPEG with TurboJPEG at its default settings (accurate integer IDCT, smooth
// chroma upsampling), which is what PIL asks libjpeg for; Debian's
// libjpeg-turbo then gives the same bytes as the reference.
// Four-component (CMYK/YCCK) files are converted as PIL does: it assumes the
// Adobe convention (samples stored inverted) and maps CMYK to RGB with its
// own integer formula.
#include <fmt/core.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"
#include "qvl/image/orientation.h"

namespace qvl::detail {
namespace {

struct TurboJpegHandle {
  tjhandle handle = tjInitDecompress();
  ~TurboJpegHandle() {
    if (handle) tjDestroy(handle);
  }
};

std::string lowercase(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// libjpeg only warns when data runs out and fills the rest with gray; for us
// that is a broken file. Other warnings (stray bytes between markers) are
// harmless and PIL ignores them too.
bool is_truncation_warning(const std::string& message) {
  return lowercase(message).find("premature end") != std::string::npos;
}

// PIL's (a * b) / 255 with rounding, in integers.
inline int mul_div_255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

void cmyk_to_rgb(const std::vector<uint8_t>& cmyk, RgbImage& image) {
  const size_t count = size_t(image.width * image.height);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* in = &cmyk[4 * i];
    // Stored inverted, so the ink amount is 255 - sample and the paper left by
    // black is (255 - black ink) = the stored K sample.
    const int white_left = in[3];
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - in[c];
      image.pixels[3 * i + c] = uint8_t(std::clamp(white_left - mul_div_255(ink, white_left), 0, 255));
    }
  }
}

// The DCT scale to decode at: the smallest of 1/8, 1/4, 1/2 whose scaled size
// still has at least `target` pixels (so the exact resize after it still only
// shrinks), else 1/1. libjpeg scales in the IDCT: far less work and memory.
tjscalingfactor choose_scale(int width, int height, int64_t target) {
  if (target > 0) {
    for (int denom : {8, 4, 2}) {
      const tjscalingfactor f{1, denom};
      if (int64_t(TJSCALED(width, f)) * TJSCALED(height, f) >= target) return f;
    }
  }
  return {1, 1};
}

}  // namespace

RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     const DecodeRequest& request, int* orientation) {
  TurboJpegHandle tj;
  if (!tj.handle) throw Error(fmt::format("{}: cannot initialise the JPEG decoder", name));
  // TurboJPEG takes a non-const pointer but does not write through it.
  auto* bytes = const_cast<unsigned char*>(data);
  const unsigned long length = static_cast<unsigned long>(size);

  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.handle, bytes, length, &width, &height, &subsampling, &colorspace) != 0) {
    const std::string why = tjGetErrorStr2(tj.handle);
    if (tjGetErrorCode(tj.handle) != TJERR_WARNING || width <= 0 || height <= 0 || is_truncation_warning(why))
      throw Error(fmt::format("{}: invalid JPEG: {}", name, why));
  }
  if (width <= 0 || height <= 0 || int64_t(width) * height > limits.max_declared_pixels)
    throw Error(fmt::format("{}: image is {}x{} = {} pixels, over the limit of {} pixels", name, width, height,
                            int64_t(width) * height, std::min(limits.max_pixels, limits.max_declared_pixels)));
  const tjscalingfactor scale = choose_scale(width, height, request.target_max_pixels);
  const int file_width = width, file_height = height;
  width = TJSCALED(width, scale);
  height = TJSCALED(height, scale);
  check_pixel_limit(width, height, name, limits);  // the pixels we will actually decode

  const bool four_components = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  RgbImage image;
  image.width = width;
  image.height = height;
  if (scale.num != scale.denom) {
    image.unscaled_width = file_width;
    image.unscaled_height = file_height;
  }
  image.pixels.resize(size_t(width) * size_t(height) * 3);
  std::vector<uint8_t> cmyk(four_components ? size_t(width) * size_t(height) * 4 : 0);
  uint8_t* out = four_components ? cmyk.data() : image.pixels.data();
  const int format = four_components ? TJPF_CMYK : TJPF_RGB;
  // Bounds the work a hostile progressive file can ask for; real files use ~10 scans.
  const int flags = TJFLAG_LIMITSCANS;
  if (tjDecompress2(tj.handle, bytes, length, out, width, 0, height, format, flags) != 0) {
    const std::string why = tjGetErrorStr2(tj.handle);
    if (tjGetErrorCode(tj.handle) != TJERR_WARNING)
      throw Error(fmt::format("{}: corrupt JPEG: {}", name, why));
    if (is_truncation_warning(why)) throw Error(fmt::format("{}: truncated JPEG: {}", name, why));
  }
  if (four_components) cmyk_to_rgb(cmyk, image);
  *orientation = jpeg_orientation(data, size);
  return image;
}

}  // namespace qvl::detail
