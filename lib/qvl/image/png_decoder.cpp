// PNG with libpng, converted to RGB the way PIL does: 16-bit samples keep their
// high byte, except 16-bit grayscale, which PIL opens as I;16 and clips to 255;
// alpha and tRNS transparency are dropped; gAMA/iCCP are ignored, as PIL does.
//
// libpng reports errors by longjmp. A longjmp must not cross a C++ frame that
// owns objects with destructors, so every libpng call that can fail runs inside
// one of the small "stage" functions below, whose frames hold only plain data;
// a failed stage returns false and the C++ caller throws.
#include <fmt/core.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"
#include "qvl/image/orientation.h"

namespace qvl::detail {
namespace {

struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[256];  // filled by on_png_error before it jumps
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->error, sizeof input->error, "%s", message);
  png_longjmp(png, 1);
}

void ignore_png_warning(png_structp, png_const_charp) {}  // benign (bad ancillary chunks); the library never prints

void read_png_bytes(png_structp png, png_bytep out, size_t count) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (count > input->size - input->pos) png_error(png, "file is truncated");
  std::memcpy(out, input->data + input->pos, count);
  input->pos += count;
}

// --- stages: plain locals only (see the note at the top) ---

bool stage_read_header(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  return true;
}

// Asks libpng for 8-bit gray or RGB without alpha (16-bit gray stays 16-bit).
bool stage_set_transforms(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16 && color_type != PNG_COLOR_TYPE_GRAY) png_set_strip_16(png);  // keeps the high byte
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

bool stage_read_rows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

bool stage_read_end(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_end(png, info);
  return true;
}

// Owns the libpng structures.
struct PngReader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

// The bytes up to the first chunk other than pixel data that claims more
// data than the file has left: libpng allocates such a chunk's stated length
// before reading it (1.6 GB for a forged eXIf length in a 150-byte file), so
// it is not shown that chunk and finds the file cut short there instead. Pixel
// data (IDAT) is streamed, and a cut there is reported as it always was.
size_t whole_chunks_size(const uint8_t* data, size_t size) {
  size_t pos = 8;  // the signature
  while (pos + 8 <= size) {
    const uint64_t length = uint64_t(data[pos]) << 24 | uint64_t(data[pos + 1]) << 16 | uint64_t(data[pos + 2]) << 8 |
                            data[pos + 3];
    if (length + 12 > size - pos) return std::memcmp(data + pos + 4, "IDAT", 4) == 0 ? size : pos;
    pos += length + 12;
  }
  return size;
}

int png_orientation(png_structp png, png_infop info) {
  png_uint_32 size = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(png, info, &size, &exif) == 0 || !exif) return 1;
  return exif_orientation(exif, size);
}

}  // namespace

RgbImage decode_png(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    int* orientation) {
  PngInput input{data, whole_chunks_size(data, size), 0, {}};
  PngReader reader;
  reader.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input, on_png_error, ignore_png_warning);
  if (!reader.png) throw Error(fmt::format("{}: cannot initialise the PNG decoder", name));
  reader.info = png_create_info_struct(reader.png);
  if (!reader.info) throw Error(fmt::format("{}: cannot initialise the PNG decoder", name));
  png_set_read_fn(reader.png, &input, read_png_bytes);
  // Our own pixel limit decides, with its clearer message; libpng's per-side default (1e6) would preempt it.
  png_set_user_limits(reader.png, 0x7fffffff, 0x7fffffff);

  if (!stage_read_header(reader.png, reader.info))
    throw Error(fmt::format("{}: invalid PNG: {}", name, input.error));
  const int64_t width = png_get_image_width(reader.png, reader.info);
  const int64_t height = png_get_image_height(reader.png, reader.info);
  check_pixel_limit(width, height, name, limits);

  if (!stage_set_transforms(reader.png, reader.info))
    throw Error(fmt::format("{}: invalid PNG: {}", name, input.error));
  const int channels = png_get_channels(reader.png, reader.info);
  const int bit_depth = png_get_bit_depth(reader.png, reader.info);
  const size_t row_bytes = png_get_rowbytes(reader.png, reader.info);
  const size_t sample_bytes = bit_depth == 16 ? 2 : 1;
  if (!((channels == 1 || channels == 3) && (bit_depth == 8 || (bit_depth == 16 && channels == 1))) ||
      row_bytes != size_t(width) * channels * sample_bytes)
    throw Error(fmt::format("{}: unsupported PNG layout ({} channels, {}-bit)", name, channels, bit_depth));

  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width * height * 3));
  // 8-bit RGB lands in place; gray goes through a scratch buffer and is widened below.
  const bool in_place = channels == 3;
  std::vector<uint8_t> scratch(in_place ? 0 : row_bytes * size_t(height));
  uint8_t* base = in_place ? image.pixels.data() : scratch.data();
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[size_t(y)] = base + size_t(y) * row_bytes;

  if (!stage_read_rows(reader.png, rows.data()))
    throw Error(fmt::format("{}: corrupt or truncated PNG: {}", name, input.error));
  // Like PIL, data after the pixels (a missing IEND, a bad trailing chunk) is not an error.
  // Reading on also picks up an eXIf chunk stored after the pixels.
  stage_read_end(reader.png, reader.info);

  if (!in_place) {
    uint8_t* out = image.pixels.data();
    const size_t count = size_t(width * height);
    for (size_t i = 0; i < count; ++i, out += 3) {
      uint8_t v;
      if (bit_depth == 16) {
        const unsigned wide = unsigned(scratch[2 * i]) << 8 | scratch[2 * i + 1];  // PNG is big-endian
        v = wide > 255 ? 255 : uint8_t(wide);
      } else {
        v = scratch[i];
      }
      out[0] = out[1] = out[2] = v;
    }
  }
  *orientation = png_orientation(reader.png, reader.info);
  return image;
}

}  // namespace qvl::detail
