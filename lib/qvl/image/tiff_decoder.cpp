// TIFF with libtiff, read from memory (TIFFClientOpenExt). A page is a
// directory (IFD). The layouts people have (8- and 16-bit gray, palette, RGB,
// RGBA, CMYK, 1/2/4-bit gray and palette, strips or tiles, any codec libtiff
// has) are converted here the way PIL converts them, so the bytes match the
// reference; anything else goes through libtiff's own RGBA conversion
// (TIFFRGBAImage: YCbCr without JPEG, CIELab, separate planes...), close to PIL
// but not byte-exact.
//
// libtiff prints errors and warnings to stderr unless told otherwise: every
// handle gets handlers that capture the first error into the exception instead,
// and the process-wide handlers are cleared once for messages sent before a
// handle exists.
#include <fmt/core.h>
#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"

namespace qvl::detail {
namespace {

// ---------------------------------------------------------------- memory I/O and messages

struct TiffSource {
  const uint8_t* data;
  size_t size;
  uint64_t pos = 0;
  std::string name;
  std::string first_error;
  std::string first_warning;
};

tmsize_t read_proc(thandle_t handle, void* out, tmsize_t count) {
  auto* src = static_cast<TiffSource*>(handle);
  if (count <= 0 || src->pos >= src->size) return 0;
  const uint64_t n = std::min<uint64_t>(uint64_t(count), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, size_t(n));
  src->pos += n;
  return tmsize_t(n);
}
tmsize_t write_proc(thandle_t, void*, tmsize_t) { return 0; }
toff_t seek_proc(thandle_t handle, toff_t offset, int whence) {
  auto* src = static_cast<TiffSource*>(handle);
  uint64_t base = whence == SEEK_CUR ? src->pos : whence == SEEK_END ? src->size : 0;
  // Seeking past the end is allowed (reads there return 0 bytes); wrapping is not.
  if (offset > UINT64_MAX - base) return toff_t(-1);
  src->pos = base + offset;
  return src->pos;
}
int close_proc(thandle_t) { return 0; }
toff_t size_proc(thandle_t handle) { return static_cast<TiffSource*>(handle)->size; }
int map_proc(thandle_t, void**, toff_t*) { return 0; }
void unmap_proc(thandle_t, void*, toff_t) {}

// libtiff's read errors name the scanline, row or tile it was at, which for a
// strip read before any row is 4294967295 (its "no row yet"): noise to a user.
// The common ones are said plainly; elsewhere only the scanline is dropped.
std::string plain_libtiff_message(const std::string& message) {
  static const std::string where = R"((at scanline \d+|on strip \d+|at row \d+, col \d+, tile \d+|on tile \d+))";
  static const std::regex cut_short("Read error " + where + R"(; got (\d+) bytes, expected (\d+))");
  static const std::regex seek("Seek error " + where);
  static const std::regex scanline(R"( at scanline \d+)");
  std::smatch m;
  if (std::regex_search(message, m, cut_short))
    return fmt::format("its image data ends early ({} of {} bytes)", m[2].str(), m[3].str());
  if (std::regex_search(message, m, seek)) return "its image data lies outside the file";
  return std::regex_replace(message, scanline, "");
}

int capture_error(TIFF*, void* user, const char* module, const char* format, va_list args) {
  auto* src = static_cast<TiffSource*>(user);
  if (src->first_error.empty()) {
    char text[400];
    std::vsnprintf(text, sizeof text, format, args);
    src->first_error = text;
    // libtiff often starts with the file name we gave it; ours leads the message already.
    if (src->first_error.rfind(src->name + ": ", 0) == 0) src->first_error.erase(0, src->name.size() + 2);
    if (src->first_error.empty() && module) src->first_error = module;
    std::replace(src->first_error.begin(), src->first_error.end(), '\n', ' ');
    src->first_error = plain_libtiff_message(src->first_error);
  }
  return 1;  // handled: libtiff prints nothing
}
int capture_warning(TIFF*, void* user, const char*, const char* format, va_list args) {
  auto* src = static_cast<TiffSource*>(user);
  if (src->first_warning.empty()) {
    char text[400];
    std::vsnprintf(text, sizeof text, format, args);
    src->first_warning = text;
  }
  return 1;  // handled: libtiff prints nothing
}

void silence_global_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    TIFFSetErrorHandler(nullptr);
    TIFFSetWarningHandler(nullptr);
  });
}

// One open TIFF; errors and warnings land in source.first_error.
class TiffFile {
 public:
  TiffFile(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits)
      : name_(name), source_{data, size, 0, name, {}, {}} {
    silence_global_handlers();
    TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
    if (!options) throw Error(fmt::format("{}: cannot initialise the TIFF decoder", name));
    TIFFOpenOptionsSetErrorHandlerExtR(options, capture_error, &source_);
    TIFFOpenOptionsSetWarningHandlerExtR(options, capture_warning, &source_);
    // No single buffer (a strip, a tile, a tag array) larger than 16 bytes per allowed pixel.
    const int64_t cap = std::max<int64_t>(64ll << 20, std::min<int64_t>(limits.max_pixels, int64_t(1) << 40) * 16);
    TIFFOpenOptionsSetMaxSingleMemAlloc(options, tmsize_t(cap));
    // "m": no memory mapping (we are the memory).
    tif_ = TIFFClientOpenExt(name.c_str(), "rm", &source_, read_proc, write_proc, seek_proc, close_proc, size_proc,
                             map_proc, unmap_proc, options);
    TIFFOpenOptionsFree(options);
    if (!tif_) fail("invalid TIFF");
  }
  ~TiffFile() {
    if (tif_) TIFFClose(tif_);
  }
  TiffFile(const TiffFile&) = delete;
  TiffFile& operator=(const TiffFile&) = delete;

  TIFF* get() const { return tif_; }
  [[noreturn]] void fail(const std::string& what) const {
    const std::string why = source_.first_error.empty() ? "" : ": " + source_.first_error;
    throw Error(fmt::format("{}: {}{}", name_, what, why));
  }

  // Directories up to the first unreadable one, and more than max_pages
  // refused. A directory pointing back at an earlier one (libtiff stops there
  // with a warning) ends the count too: the pages before it can be read, so
  // the error is put in `loop` for the caller to report after them.
  int count_pages(int max_pages, std::string* loop) {
    int pages = 1;
    while (TIFFReadDirectory(tif_)) {
      if (++pages > max_pages)
        throw Error(fmt::format("{}: TIFF has more than {} pages (directories), over the limit", name_, max_pages));
    }
    loop->clear();
    if (source_.first_warning.find("looping") != std::string::npos)
      *loop = fmt::format("{}: damaged TIFF: its directory chain loops ({})", name_, source_.first_warning);
    source_.first_error.clear();  // an unreadable directory ends the count; decoding that page reports it
    return pages;
  }

 private:
  std::string name_;
  TiffSource source_;
  TIFF* tif_ = nullptr;
};

// ---------------------------------------------------------------- converting rows as PIL does

inline int mul_div_255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

struct Layout {
  uint16_t photometric = 0, bits = 0, samples = 0, extra = 0;
  bool associated_alpha = false;  // premultiplied colour (PIL's "RGBa": divided back out)
  std::vector<uint8_t> palette;   // 3 bytes per entry, PIL's (value // 256)
};

// Sample `index` of a row segment (byte-aligned at its start).
inline unsigned sample_at(const uint8_t* row, int64_t index, int bits) {
  switch (bits) {
    case 8: return row[index];
    case 16: {
      uint16_t v;
      std::memcpy(&v, row + 2 * index, 2);  // libtiff has already swapped to host order
      return v;
    }
    default: {
      const int64_t bit = index * bits;
      return (row[bit >> 3] >> (8 - bits - (bit & 7))) & ((1u << bits) - 1);
    }
  }
}

// `count` pixels of one stored row segment to RGB.
void convert_row(const Layout& L, const uint8_t* row, int64_t count, uint8_t* out) {
  const int spp = L.samples;
  const unsigned max_value = (1u << L.bits) - 1;
  for (int64_t i = 0; i < count; ++i, out += 3) {
    const int64_t s = i * spp;
    switch (L.photometric) {
      case PHOTOMETRIC_MINISBLACK:
      case PHOTOMETRIC_MINISWHITE: {
        unsigned v = sample_at(row, s, L.bits);
        if (L.bits == 16) {
          v = std::min(v, 255u);  // PIL: I;16 clipped to 0..255
        } else {
          if (L.photometric == PHOTOMETRIC_MINISWHITE) v = max_value - v;
          v = v * 255 / max_value;
        }
        out[0] = out[1] = out[2] = uint8_t(v);
        break;
      }
      case PHOTOMETRIC_PALETTE: {
        const unsigned v = sample_at(row, s, L.bits);
        std::memcpy(out, &L.palette[3 * v], 3);
        break;
      }
      case PHOTOMETRIC_RGB: {
        unsigned c[3];
        for (int k = 0; k < 3; ++k) c[k] = sample_at(row, s + k, L.bits) >> (L.bits - 8);  // 16-bit: high byte
        if (L.associated_alpha) {
          const unsigned a = sample_at(row, s + 3, L.bits) >> (L.bits - 8);
          for (unsigned& v : c) v = a == 0 ? 0 : a == 255 ? v : std::min(255u, v * 255 / a);
        }
        for (int k = 0; k < 3; ++k) out[k] = uint8_t(c[k]);
        break;
      }
      case PHOTOMETRIC_SEPARATED: {
        const int white_left = 255 - int(sample_at(row, s + 3, L.bits) >> (L.bits - 8));
        for (int k = 0; k < 3; ++k) {
          const int ink = int(sample_at(row, s + k, L.bits) >> (L.bits - 8));
          out[k] = uint8_t(std::clamp(white_left - mul_div_255(ink, white_left), 0, 255));
        }
        break;
      }
    }
  }
}

// The layouts convert_row handles; false sends the page to TIFFRGBAImage.
bool read_layout(TIFF* tif, Layout* L) {
  uint16_t planar = PLANARCONFIG_CONTIG, format = SAMPLEFORMAT_UINT;
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &L->bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &L->samples);
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &L->photometric)) return false;
  uint16_t extra_count = 0;
  uint16_t* extra_types = nullptr;
  TIFFGetFieldDefaulted(tif, TIFFTAG_EXTRASAMPLES, &extra_count, &extra_types);
  L->extra = extra_count;
  // At most 8 samples a pixel (RGBA and a few extra channels): keeps each strip
  // buffer within 16 bytes a pixel; more goes to TIFFRGBAImage (or is refused there).
  if (planar != PLANARCONFIG_CONTIG || format != SAMPLEFORMAT_UINT || L->samples < 1 || L->samples > 8) return false;
  const int colour = L->samples - extra_count;
  const int bits = L->bits;
  switch (L->photometric) {
    case PHOTOMETRIC_MINISBLACK:
      return colour == 1 && (bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16);
    case PHOTOMETRIC_MINISWHITE:
      return colour == 1 && (bits == 1 || bits == 2 || bits == 4 || bits == 8);
    case PHOTOMETRIC_RGB:
      if (colour != 3 || (bits != 8 && bits != 16)) return false;
      L->associated_alpha = extra_count >= 1 && extra_types && extra_types[0] == EXTRASAMPLE_ASSOCALPHA;
      return true;
    case PHOTOMETRIC_SEPARATED: {
      uint16_t inkset = INKSET_CMYK;
      TIFFGetFieldDefaulted(tif, TIFFTAG_INKSET, &inkset);
      return inkset == INKSET_CMYK && L->samples >= 4 && (bits == 8 || bits == 16);
    }
    case PHOTOMETRIC_PALETTE: {
      if (L->samples != 1 || !(bits == 1 || bits == 2 || bits == 4 || bits == 8)) return false;
      uint16_t *r = nullptr, *g = nullptr, *b = nullptr;
      if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &r, &g, &b) || !r || !g || !b) return false;
      const size_t entries = size_t(1) << bits;
      L->palette.resize(3 * entries);
      for (size_t i = 0; i < entries; ++i) {
        L->palette[3 * i] = uint8_t(r[i] >> 8);
        L->palette[3 * i + 1] = uint8_t(g[i] >> 8);
        L->palette[3 * i + 2] = uint8_t(b[i] >> 8);
      }
      return true;
    }
    default: return false;
  }
}

void read_strips(const TiffFile& file, const Layout& L, RgbImage& image) {
  TIFF* tif = file.get();
  uint32_t rows_per_strip = 0;
  TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
  const int64_t rps = std::clamp<int64_t>(rows_per_strip, 1, image.height);
  const tmsize_t row_bytes = TIFFScanlineSize(tif);
  const tmsize_t strip_bytes = TIFFStripSize(tif);
  if (row_bytes <= 0 || strip_bytes <= 0) file.fail("invalid TIFF strip layout");
  std::vector<uint8_t> strip(static_cast<size_t>(strip_bytes));
  const uint32_t strips = TIFFNumberOfStrips(tif);
  for (int64_t y0 = 0, s = 0; y0 < image.height; y0 += rps, ++s) {
    if (uint32_t(s) >= strips) file.fail("damaged TIFF: strips are missing");
    const int64_t rows = std::min(rps, image.height - y0);
    const tmsize_t got = TIFFReadEncodedStrip(tif, uint32_t(s), strip.data(), strip_bytes);
    if (got < tmsize_t(rows * row_bytes)) file.fail("damaged TIFF");
    for (int64_t r = 0; r < rows; ++r)
      convert_row(L, strip.data() + r * row_bytes, image.width, image.at(0, y0 + r));
  }
}

void read_tiles(const TiffFile& file, const Layout& L, RgbImage& image) {
  TIFF* tif = file.get();
  uint32_t tile_w = 0, tile_h = 0;
  TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tile_w);
  TIFFGetField(tif, TIFFTAG_TILELENGTH, &tile_h);
  const tmsize_t tile_bytes = TIFFTileSize(tif);
  const tmsize_t row_bytes = TIFFTileRowSize(tif);
  if (tile_w == 0 || tile_h == 0 || tile_bytes <= 0 || row_bytes <= 0) file.fail("invalid TIFF tile layout");
  // A tile may overhang the image, but not by absurd amounts (a 65536x65536 tile on a small image).
  const int64_t area = std::max<int64_t>(image.width * image.height, 512 * 512);
  if (int64_t(tile_w) * tile_h > 4 * area)
    file.fail(fmt::format("invalid TIFF: {}x{} tiles for a {}x{} image", tile_w, tile_h, image.width, image.height));
  std::vector<uint8_t> tile(static_cast<size_t>(tile_bytes));
  for (int64_t y0 = 0; y0 < image.height; y0 += tile_h) {
    for (int64_t x0 = 0; x0 < image.width; x0 += tile_w) {
      const tmsize_t got = TIFFReadTile(tif, tile.data(), uint32_t(x0), uint32_t(y0), 0, 0);
      if (got < tile_bytes) file.fail("damaged TIFF");
      const int64_t rows = std::min<int64_t>(tile_h, image.height - y0);
      const int64_t cols = std::min<int64_t>(tile_w, image.width - x0);
      for (int64_t r = 0; r < rows; ++r) convert_row(L, tile.data() + r * row_bytes, cols, image.at(x0, y0 + r));
    }
  }
}

// libtiff's own conversion, in stored row order (we apply the orientation).
void read_rgba(const TiffFile& file, RgbImage& image) {
  TIFF* tif = file.get();
  char why[1024] = "";
  TIFFRGBAImage img;
  if (!TIFFRGBAImageBegin(&img, tif, 1, why)) file.fail(std::string("unsupported TIFF layout: ") + why);
  img.req_orientation = img.orientation;  // no flips: rows as stored, top first
  std::vector<uint32_t> raster(size_t(image.width * image.height));
  const int ok = TIFFRGBAImageGet(&img, raster.data(), uint32_t(image.width), uint32_t(image.height));
  TIFFRGBAImageEnd(&img);
  if (!ok) file.fail("damaged TIFF");
  for (size_t i = 0; i < raster.size(); ++i) {
    image.pixels[3 * i] = uint8_t(TIFFGetR(raster[i]));
    image.pixels[3 * i + 1] = uint8_t(TIFFGetG(raster[i]));
    image.pixels[3 * i + 2] = uint8_t(TIFFGetB(raster[i]));
  }
}

}  // namespace

int tiff_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    std::string* loop) {
  TiffFile file(data, size, name, limits);
  return file.count_pages(limits.max_pages, loop);
}

RgbImage decode_tiff(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     const DecodeRequest& request, int* orientation) {
  TiffFile file(data, size, name, limits);
  TIFF* tif = file.get();
  if (request.page > 1) {
    std::string loop;
    const int pages = file.count_pages(limits.max_pages, &loop);
    if (request.page > pages && !loop.empty()) throw Error(loop);
    check_page(request.page, pages, name);
    if (!TIFFSetDirectory(tif, tdir_t(request.page - 1))) file.fail(fmt::format("cannot read TIFF page {}", request.page));
  }
  uint32_t width = 0, height = 0;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &width) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &height))
    file.fail("invalid TIFF: no image size");
  check_pixel_limit(width, height, name, limits);

  uint16_t compression = COMPRESSION_NONE, photometric = 0;
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
  TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric);
  // JPEG-in-TIFF: let the codec convert YCbCr to RGB, as PIL does.
  if (compression == COMPRESSION_JPEG && photometric == PHOTOMETRIC_YCBCR) {
    TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
  }

  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(size_t(image.width) * size_t(image.height) * 3);
  Layout layout;
  if (read_layout(tif, &layout)) {
    if (TIFFIsTiled(tif)) read_tiles(file, layout, image);
    else read_strips(file, layout, image);
  } else {
    char why[1024] = "";
    if (!TIFFRGBAImageOK(tif, why)) file.fail(std::string("unsupported TIFF layout: ") + why);
    read_rgba(file, image);
  }
  uint16_t stored_orientation = ORIENTATION_TOPLEFT;
  TIFFGetFieldDefaulted(tif, TIFFTAG_ORIENTATION, &stored_orientation);
  *orientation = stored_orientation;
  return image;
}

}  // namespace qvl::detail
