#include "qvl/image/orientation.h"

#include <cstring>
#include <string>
#include <utility>

namespace qvl {
namespace {

// Bounds-checked TIFF reader; every read past the end yields 0.
struct TiffReader {
  const uint8_t* data;
  size_t size;
  bool little_endian;

  uint32_t u16(size_t at) const {
    if (at + 2 > size) return 0;
    return little_endian ? data[at] | data[at + 1] << 8 : data[at] << 8 | data[at + 1];
  }
  uint32_t u32(size_t at) const {
    if (at + 4 > size) return 0;
    return little_endian ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  }
};

constexpr uint16_t kOrientationTag = 0x0112;
constexpr uint16_t kTypeShort = 3, kTypeLong = 4;

bool starts_with(const uint8_t* data, size_t size, const char* prefix, size_t n) {
  return size >= n && std::memcmp(data, prefix, n) == 0;
}

int orientation_or_default(uint32_t value) { return value >= 1 && value <= 8 ? int(value) : 1; }

// XMP stores it as an attribute (tiff:Orientation="6") or an element (<tiff:Orientation>6<).
int xmp_orientation(const uint8_t* data, size_t size) {
  const std::string xmp(reinterpret_cast<const char*>(data), size);
  const std::string key = "tiff:Orientation";
  for (size_t at = xmp.find(key); at != std::string::npos; at = xmp.find(key, at + 1)) {
    size_t v = at + key.size();
    if (v < xmp.size() && xmp[v] == '>') v += 1;
    else if (v + 1 < xmp.size() && xmp[v] == '=' && xmp[v + 1] == '"') v += 2;
    else continue;
    if (v < xmp.size() && xmp[v] >= '0' && xmp[v] <= '9') return orientation_or_default(uint32_t(xmp[v] - '0'));
  }
  return 1;
}

// 0 when the tag is absent (PIL then falls back to XMP), else the tag's value or 1 if invalid.
int orientation_tag(const uint8_t* exif, size_t size) {
  if (starts_with(exif, size, "Exif\0\0", 6)) {
    exif += 6;
    size -= 6;
  }
  bool little;
  if (starts_with(exif, size, "II*\0", 4)) little = true;
  else if (starts_with(exif, size, "MM\0*", 4)) little = false;
  else return 0;
  TiffReader tiff{exif, size, little};
  const size_t ifd0 = tiff.u32(4);
  const uint32_t entries = tiff.u16(ifd0);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t entry = ifd0 + 2 + size_t(i) * 12;
    if (entry + 12 > size) break;
    if (tiff.u16(entry) != kOrientationTag) continue;
    const uint32_t type = tiff.u16(entry + 2);
    if (type == kTypeShort) return orientation_or_default(tiff.u16(entry + 8));
    if (type == kTypeLong) return orientation_or_default(tiff.u32(entry + 8));
    return 1;
  }
  return 0;
}

}  // namespace

int exif_orientation(const uint8_t* exif, size_t size) {
  const int tag = orientation_tag(exif, size);
  return tag ? tag : 1;
}

int jpeg_orientation(const uint8_t* data, size_t size) {
  static const char kXmpHeader[] = "http://ns.adobe.com/xap/1.0/";
  int from_exif = 0, from_xmp = 0;
  bool seen_exif = false;
  size_t at = 2;  // after SOI
  while (at + 4 <= size && data[at] == 0xFF) {
    const uint8_t marker = data[at + 1];
    if (marker == 0xFF) {  // fill byte
      at += 1;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) break;  // start of scan / end of image: no more metadata
    const size_t length = size_t(data[at + 2]) << 8 | data[at + 3];
    if (length < 2 || at + 2 + length > size) break;
    const uint8_t* body = data + at + 4;
    const size_t body_size = length - 2;
    if (marker == 0xE1) {
      if (!seen_exif && starts_with(body, body_size, "Exif\0\0", 6)) {
        seen_exif = true;  // PIL keeps the first EXIF block
        from_exif = orientation_tag(body, body_size);
      }
      if (!from_xmp && starts_with(body, body_size, kXmpHeader, sizeof kXmpHeader))
        from_xmp = xmp_orientation(body, body_size);
    }
    at += 2 + length;
  }
  if (from_exif) return from_exif;
  return from_xmp ? from_xmp : 1;
}

RgbImage apply_orientation(RgbImage in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int64_t w = in.width, h = in.height;
  const bool swaps_axes = orientation >= 5;
  RgbImage out;
  out.width = swaps_axes ? h : w;
  out.height = swaps_axes ? w : h;
  out.unscaled_width = swaps_axes ? in.unscaled_height : in.unscaled_width;
  out.unscaled_height = swaps_axes ? in.unscaled_width : in.unscaled_height;
  out.pixels.resize(in.pixels.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = x, sy = y;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                  // mirrored
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;  // upside down
        case 4: sy = h - 1 - y; break;                  // mirrored vertically
        case 5: sx = y; sy = x; break;                  // transposed
        case 6: sx = y; sy = h - 1 - x; break;          // stored turned left: turn right
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;  // transversed
        case 8: sx = w - 1 - y; sy = x; break;          // stored turned right: turn left
      }
      std::memcpy(out.at(x, y), in.at(sx, sy), 3);
    }
  }
  return out;
}

}  // namespace qvl
