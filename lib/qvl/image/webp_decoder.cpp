// WebP with libwebp: lossy, lossless, with or without alpha. Colour is decoded
// straight to RGB, which is PIL's RGBA decode with the alpha dropped (the RGB
// values under transparent pixels are whatever the file stores, as in PIL).
// An animated file is read as its first frame, as PIL and qvl's GIF reader do:
// libwebp's animation decoder composes it onto the canvas (transparent where
// the frame does not cover it, which the dropped alpha leaves black).
#include <fmt/core.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"
#include "qvl/image/orientation.h"

namespace qvl::detail {
namespace {

uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

// The orientation in an "EXIF" chunk of an extended (VP8X) file, as PIL's getexif() reads it.
int webp_orientation(const uint8_t* data, size_t size) {
  size_t at = 12;  // after "RIFF" <size> "WEBP"
  while (at + 8 <= size) {
    const uint32_t length = le32(data + at + 4);
    const size_t body = at + 8;
    if (length > size - body) break;
    if (std::memcmp(data + at, "EXIF", 4) == 0) return exif_orientation(data + body, length);
    at = body + length + (length & 1);
  }
  return 1;
}

const char* status_text(VP8StatusCode status) {
  switch (status) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "file is truncated";
    default: return "unknown error";
  }
}

// The canvas after the first frame, RGBA, with the alpha dropped.
RgbImage first_frame(const uint8_t* data, size_t size, const std::string& name) {
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) throw Error(fmt::format("{}: cannot initialise the WebP decoder", name));
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData whole = {data, size};
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> decoder(WebPAnimDecoderNew(&whole, &options),
                                                                       WebPAnimDecoderDelete);
  WebPAnimInfo info;
  if (!decoder || !WebPAnimDecoderGetInfo(decoder.get(), &info))
    throw Error(fmt::format("{}: corrupt or truncated animated WebP", name));
  uint8_t* canvas = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &canvas, &timestamp))
    throw Error(fmt::format("{}: corrupt or truncated animated WebP (its first frame cannot be read)", name));
  RgbImage image;
  image.width = info.canvas_width;
  image.height = info.canvas_height;
  const size_t pixels = size_t(image.width) * size_t(image.height);
  image.pixels.resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) std::memcpy(&image.pixels[3 * i], canvas + 4 * i, 3);
  return image;
}

}  // namespace

RgbImage decode_webp(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     int* orientation) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(data, size, &features);
  if (status != VP8_STATUS_OK) throw Error(fmt::format("{}: invalid WebP: {}", name, status_text(status)));
  // An animated file's features are its canvas size, which its first frame fills.
  check_pixel_limit(features.width, features.height, name, limits);
  if (features.has_animation) {
    RgbImage image = first_frame(data, size, name);
    *orientation = webp_orientation(data, size);
    return image;
  }

  RgbImage image;
  image.width = features.width;
  image.height = features.height;
  image.pixels.resize(size_t(image.width) * size_t(image.height) * 3);
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) throw Error(fmt::format("{}: cannot initialise the WebP decoder", name));
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = int(image.width * 3);
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode decoded = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);  // frees nothing of ours (external memory), but is the documented pairing
  if (decoded != VP8_STATUS_OK)
    throw Error(fmt::format("{}: corrupt or truncated WebP: {}", name, status_text(decoded)));
  *orientation = webp_orientation(data, size);
  return image;
}

}  // namespace qvl::detail
