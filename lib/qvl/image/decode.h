// Image files to 8-bit RGB, pixel for pixel what the reference gets from
// PIL: Image.open, ImageOps.exif_transpose, convert("RGB").
//
// PNG, JPEG, WebP (first frame), TIFF (a page is a directory), BMP (uncompressed and
// bit fields; RLE refused), GIF (first frame) and PDF (a page rendered at a dpi,
// on white; PIL does not read PDF, the reference there is pdftoppm). Where qvl
// deliberately differs from PIL 9.4: a TIFF orientation tag is applied once
// (PIL 9.4 applies it twice), and a JPEG decoded with a target size is DCT-scaled
// (see DecodeRequest). tests/unit/test_image_formats.cpp holds the evidence.
//
// Untrusted input: the format comes from the magic bytes, every size is checked
// against ImageLimits before pixel memory is allocated, and any decoder error or
// truncation becomes a one-line qvl::Error naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qvl/image/rgb_image.h"

namespace qvl {

struct ImageLimits {
  int64_t max_pixels = 50'000'000;         // width * height of the decoded (possibly DCT-scaled or rendered) image
  int64_t max_file_bytes = 256ll << 20;    // only read by decode_image_file
  // Pages (PDF) or directories (TIFF) a file may have; more is refused, so a
  // hostile file cannot make a caller loop over 100000 pages.
  int max_pages = 10'000;
  // Declared JPEG size even when DCT scaling will shrink it (a sanity bound:
  // a header can claim 65535x65535).
  int64_t max_declared_pixels = 1'000'000'000;
  // Seconds a PDF page may take to render; longer is an error (a small file
  // can hold hours of drawing). 0: no limit, rendered in this process.
  double page_timeout_s = 30;
};

// What the caller will do with the image, so a decoder can do less work.
struct DecodeRequest {
  int page = 1;                   // 1-based: a PDF page, a TIFF directory; other formats have page 1 only
  // > 0: the image will be resized to at most this many pixels (the preprocessor's
  // max_pixels). A JPEG far larger may then be decoded at 1/2, 1/4 or 1/8 scale,
  // never below this many pixels, so the exact resize that follows still shrinks.
  int64_t target_max_pixels = 0;
  int pdf_dpi = 0;                // 0: kDefaultPdfDpi
};
constexpr int kDefaultPdfDpi = 150;

enum class ImageFormat { Unknown, Png, Jpeg, Webp, Tiff, Bmp, Gif, Pdf };
ImageFormat detect_image_format(const uint8_t* data, size_t size);
const char* image_format_name(ImageFormat format);  // "png", "jpeg", "webp", "tiff", "bmp", "gif", "pdf", "unknown"

// `name` is only used in error messages (usually the file path).
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits = {},
                      const DecodeRequest& request = {});
RgbImage decode_image_file(const std::string& path, const ImageLimits& limits = {}, const DecodeRequest& request = {});

// Pages in the file: a PDF's pages, a TIFF's directories, 1 for other formats.
// Throws like decode_image for what is not a readable image.
int image_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits = {});

// For a reader that goes on past damage (qvl ocr): the pages that can be read
// and, when the file's chain of pages breaks after them (a TIFF whose
// directories loop back), the error for the rest, which image_page_count throws.
struct ReadablePages {
  int count = 0;
  std::string damage;  // "" when the file has no more pages than `count`
};
ReadablePages image_readable_pages(const uint8_t* data, size_t size, const std::string& name,
                                   const ImageLimits& limits = {});

// The whole file, with decode_image_file's checks (regular file, size limit);
// for callers that look at the bytes more than once (pages, hashing).
std::vector<uint8_t> read_image_bytes(const std::string& path, const ImageLimits& limits = {});

}  // namespace qvl
