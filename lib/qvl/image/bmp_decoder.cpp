// BMP, parsed here (no library): the Windows headers BITMAPINFOHEADER (40
// bytes) and its successors (52, 56, 64, 108, 124 bytes), and the old OS/2
// BITMAPCOREHEADER (12). Uncompressed 1/4/8-bit palette, 16/24/32-bit, and
// BI_BITFIELDS masks; rows bottom-up (positive height) or top-down (negative).
// RLE, JPEG and PNG compression are refused with a clear message.
//
// Conversion as PIL: a channel of n < 8 bits is scaled as v * 255 / (2^n - 1),
// rounding down (PIL's BGR;15/BGR;16 unpackers), an alpha channel is dropped,
// a palette index past the file's palette shows PIL's default entry (gray i,i,i).
//
// Every offset and size comes from the file, so each is checked before use.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"

namespace qvl::detail {
namespace {

uint32_t le16(const uint8_t* p) { return p[0] | p[1] << 8; }
uint32_t le32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | uint32_t(p[3]) << 24; }

constexpr uint32_t kRgb = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3, kJpeg = 4, kPng = 5, kAlphaBitfields = 6;

// One colour channel of a 16- or 32-bit pixel: where it is and how wide.
struct Channel {
  uint32_t mask = 0;
  int shift = 0, bits = 0;
  explicit Channel(uint32_t m = 0) : mask(m) {
    if (!m) return;
    while (!((m >> shift) & 1)) ++shift;
    while (shift + bits < 32 && ((m >> (shift + bits)) & 1)) ++bits;
  }
  // Masks must be contiguous runs of ones.
  bool valid() const { return mask == 0 || (bits > 0 && ((bits == 32 ? 0xFFFFFFFFu : ((1u << bits) - 1)) << shift) == mask); }
  uint8_t get(uint32_t pixel) const {
    if (!mask) return 0;
    const uint32_t v = (pixel & mask) >> shift;
    if (bits >= 8) return uint8_t(v >> (bits - 8));
    return uint8_t(v * 255 / ((1u << bits) - 1));
  }
};

}  // namespace

RgbImage decode_bmp(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits) {
  auto fail = [&](const std::string& what) -> Error { return Error(fmt::format("{}: {}", name, what)); };
  if (size < 14 + 12) throw fail("invalid BMP: file is too short for its headers");
  const uint32_t pixel_offset = le32(data + 10);
  const uint32_t header_size = le32(data + 14);
  const bool core = header_size == 12;
  if (!(core || header_size == 40 || header_size == 52 || header_size == 56 || header_size == 64 ||
        header_size == 108 || header_size == 124))
    throw fail(fmt::format("invalid or unsupported BMP: info header of {} bytes", header_size));
  if (14 + size_t(header_size) > size) throw fail("truncated BMP: the info header is cut off");
  const uint8_t* h = data + 14;

  int64_t width, height;
  uint32_t planes, bits, compression = kRgb, colours_used = 0;
  if (core) {
    width = le16(h + 4);
    height = le16(h + 6);
    planes = le16(h + 8);
    bits = le16(h + 10);
  } else {
    width = int32_t(le32(h + 4));
    height = int32_t(le32(h + 8));
    planes = le16(h + 12);
    bits = le16(h + 14);
    compression = le32(h + 16);
    colours_used = le32(h + 32);
  }
  const bool top_down = height < 0;
  if (top_down) height = -height;  // int64: -INT32_MIN fits
  if (planes != 1) throw fail(fmt::format("invalid BMP: {} colour planes (must be 1)", planes));
  if (compression == kRle8 || compression == kRle4)
    throw fail("RLE-compressed BMP is not supported (save it uncompressed, or as PNG)");
  if (compression == kJpeg || compression == kPng)
    throw fail("BMP with embedded JPEG/PNG data is not supported (save it as a plain PNG or JPEG)");
  if (compression != kRgb && compression != kBitfields && compression != kAlphaBitfields)
    throw fail(fmt::format("invalid or unsupported BMP compression {}", compression));
  if (!(bits == 1 || bits == 4 || bits == 8 || bits == 16 || bits == 24 || bits == 32))
    throw fail(fmt::format("unsupported BMP: {} bits per pixel", bits));
  if (width <= 0 || height <= 0) throw fail(fmt::format("invalid BMP: empty size {}x{}", width, height));
  check_pixel_limit(width, height, name, limits);

  // Channel masks: from the header (V2+), after it (BITMAPINFOHEADER + BI_BITFIELDS), or the defaults.
  Channel red, green, blue;
  if (bits == 16 || bits == 32) {
    if (compression == kRgb) {
      red = Channel(bits == 16 ? 0x7C00 : 0xFF0000);
      green = Channel(bits == 16 ? 0x03E0 : 0x00FF00);
      blue = Channel(bits == 16 ? 0x001F : 0x0000FF);
    } else {
      const uint8_t* masks = h + 40;
      if (header_size == 40 && size_t(14 + 40 + 12) > size) throw fail("truncated BMP: the colour masks are cut off");
      if (core || header_size == 64) throw fail("invalid BMP: bit fields in an OS/2 header");
      red = Channel(le32(masks));
      green = Channel(le32(masks + 4));
      blue = Channel(le32(masks + 8));
      if (!red.valid() || !green.valid() || !blue.valid() || (red.mask | green.mask | blue.mask) == 0)
        throw fail(fmt::format("invalid BMP colour masks {:#x} {:#x} {:#x}", red.mask, green.mask, blue.mask));
    }
  } else if (compression != kRgb) {
    throw fail(fmt::format("invalid BMP: bit fields with {} bits per pixel", bits));
  }

  // Palette: after the header (and the three masks of a BITMAPINFOHEADER with
  // bit fields), 4 bytes an entry (3 in the core format), up to the pixel data.
  uint8_t palette[256][3];
  for (int i = 0; i < 256; ++i) palette[i][0] = palette[i][1] = palette[i][2] = uint8_t(i);
  if (bits <= 8) {
    const size_t entry = core ? 3 : 4;
    const size_t start = 14 + size_t(header_size);
    size_t count = colours_used ? colours_used : size_t(1) << bits;
    count = std::min<size_t>(count, size_t(1) << bits);
    if (start + count * entry > size) throw fail("truncated BMP: the palette is cut off");
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* e = data + start + i * entry;  // stored blue, green, red
      palette[i][0] = e[2];
      palette[i][1] = e[1];
      palette[i][2] = e[0];
    }
  }

  const uint64_t stride = (uint64_t(width) * bits + 31) / 32 * 4;
  if (pixel_offset < 14 + header_size || pixel_offset > size)
    throw fail(fmt::format("invalid BMP: pixel data offset {} is outside the file ({} bytes)", pixel_offset, size));
  if (stride * uint64_t(height) > size - pixel_offset)
    throw fail(fmt::format("truncated BMP: {} rows of {} bytes need {} bytes after offset {}, the file has {}", height,
                           stride, stride * uint64_t(height), pixel_offset, size - pixel_offset));

  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width * height * 3));
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = data + pixel_offset + size_t(stride) * size_t(top_down ? y : height - 1 - y);
    uint8_t* out = image.at(0, y);
    for (int64_t x = 0; x < width; ++x, out += 3) {
      switch (bits) {
        case 1:
        case 4:
        case 8: {
          const int64_t bit = x * bits;
          const unsigned index = (row[bit >> 3] >> (8 - bits - (bit & 7))) & ((1u << bits) - 1);
          std::memcpy(out, palette[index], 3);
          break;
        }
        case 24:
          out[0] = row[3 * x + 2];
          out[1] = row[3 * x + 1];
          out[2] = row[3 * x];
          break;
        default: {
          const uint32_t pixel = bits == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
          out[0] = red.get(pixel);
          out[1] = green.get(pixel);
          out[2] = blue.get(pixel);
        }
      }
    }
  }
  return image;
}

}  // namespace qvl::detail
