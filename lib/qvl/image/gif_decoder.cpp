// GIF with giflib, read from memory: the first frame, through its palette, as
// PIL 9.4 shows it: the frame drawn at its offset on a logical screen (grown to
// hold the frame if the frame sticks out), the rest of the screen filled with
// the frame's transparent index if it has one, else index 0. Transparency is
// then dropped by convert("RGB"), so a transparent pixel shows its palette
// colour. Indices past the end of the palette show PIL's default palette entry
// (gray i,i,i). Only the records up to the first image are read, so a file with
// thousands of frames costs no more than one.
#include <fmt/core.h>
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"

namespace qvl::detail {
namespace {

struct GifSource {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
};

int read_gif_bytes(GifFileType* gif, GifByteType* out, int count) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  const size_t n = std::min(size_t(std::max(count, 0)), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
  return int(n);
}

struct GifHandle {
  GifFileType* gif = nullptr;
  ~GifHandle() {
    int error = 0;
    if (gif) DGifCloseFile(gif, &error);
  }
};

[[noreturn]] void fail(const std::string& name, const char* what, int code) {
  const char* why = GifErrorString(code);
  throw Error(fmt::format("{}: {}{}{}", name, what, why ? ": " : "", why ? why : ""));
}

}  // namespace

RgbImage decode_gif(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits) {
  GifSource source{data, size};
  GifHandle handle;
  int error = 0;
  handle.gif = DGifOpen(&source, read_gif_bytes, &error);
  if (!handle.gif) fail(name, "invalid GIF", error);
  GifFileType* gif = handle.gif;

  int transparent = -1;
  for (;;) {
    GifRecordType record;
    if (DGifGetRecordType(gif, &record) == GIF_ERROR) fail(name, "corrupt or truncated GIF", gif->Error);
    if (record == TERMINATE_RECORD_TYPE) throw Error(fmt::format("{}: GIF has no image in it", name));
    if (record == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* block = nullptr;
      if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) fail(name, "corrupt GIF", gif->Error);
      if (code == GRAPHICS_EXT_FUNC_CODE && block && block[0] >= 4 && (block[1] & 1)) transparent = block[4];
      while (block) {
        if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) fail(name, "corrupt GIF", gif->Error);
      }
      continue;
    }
    if (record != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif) == GIF_ERROR) fail(name, "corrupt GIF", gif->Error);
    break;
  }

  const GifImageDesc& frame = gif->Image;
  const ColorMapObject* palette = frame.ColorMap ? frame.ColorMap : gif->SColorMap;
  const int64_t left = frame.Left, top = frame.Top, fw = frame.Width, fh = frame.Height;
  const int64_t width = std::max<int64_t>(gif->SWidth, left + fw);
  const int64_t height = std::max<int64_t>(gif->SHeight, top + fh);
  check_pixel_limit(width, height, name, limits);
  if (fw <= 0 || fh <= 0) throw Error(fmt::format("{}: GIF frame has an empty size {}x{}", name, fw, fh));

  // Palette index -> RGB; PIL's default entries past the file's palette.
  uint8_t colours[256][3];
  for (int i = 0; i < 256; ++i) colours[i][0] = colours[i][1] = colours[i][2] = uint8_t(i);
  if (palette) {
    for (int i = 0; i < std::min(palette->ColorCount, 256); ++i) {
      colours[i][0] = palette->Colors[i].Red;
      colours[i][1] = palette->Colors[i].Green;
      colours[i][2] = palette->Colors[i].Blue;
    }
  }

  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(width * height * 3));
  const uint8_t* fill = colours[transparent >= 0 ? transparent : 0];
  for (size_t i = 0; i < size_t(width * height); ++i) std::memcpy(&image.pixels[3 * i], fill, 3);

  // Interlaced frames store rows in four passes: every 8th from 0, every 8th from 4, every 4th from 2, odd rows.
  std::vector<int64_t> row_order;
  row_order.reserve(size_t(fh));
  if (frame.Interlace) {
    const int64_t starts[4] = {0, 4, 2, 1}, steps[4] = {8, 8, 4, 2};
    for (int p = 0; p < 4; ++p)
      for (int64_t y = starts[p]; y < fh; y += steps[p]) row_order.push_back(y);
  } else {
    for (int64_t y = 0; y < fh; ++y) row_order.push_back(y);
  }
  std::vector<GifPixelType> row(static_cast<size_t>(fw));
  for (int64_t y : row_order) {
    if (DGifGetLine(gif, row.data(), int(fw)) == GIF_ERROR) fail(name, "corrupt or truncated GIF", gif->Error);
    for (int64_t x = 0; x < fw; ++x) std::memcpy(image.at(left + x, top + y), colours[row[size_t(x)]], 3);
  }
  return image;
}

}  // namespace qvl::detail
