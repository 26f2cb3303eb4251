// PDF with poppler-cpp: a page is rendered (Splash, anti-aliased shapes and
// text, as pdftoppm does by default) at DecodeRequest::pdf_dpi to RGB on white.
// The size the page will have, from its crop box, /Rotate and the dpi, is checked
// against ImageLimits::max_pixels before anything is rendered.
//
// poppler reports syntax errors and warnings through a process-wide debug
// function that prints to stderr by default; ours keeps the first message of the
// current thread for the error text instead.
#include <dlfcn.h>
#include <fmt/core.h>
#include <poppler-document.h>
#include <poppler-global.h>
#include <poppler-image.h>
#include <poppler-page-renderer.h>
#include <poppler-page.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "qvl/error.h"
#include "qvl/image/format_decoders.h"

#include <jpeglib.h>  // after <cstdio>, which it needs

// poppler decodes a PDF's embedded JPEG images (DCTDecode) with the system
// libjpeg and keeps libjpeg's default message handler, which prints warnings
// such as "Corrupt JPEG data: premature end of data segment" straight to
// stderr; poppler offers no setting for it. This definition of
// jpeg_std_error, in the executable, takes precedence over libjpeg's for every
// shared library that calls it (ELF symbol interposition): it sets up libjpeg's
// standard handler as before, then replaces only the printing of messages with
// nothing. Errors still reach the caller's error_exit (poppler and libtiff set
// their own, which recover), and libtiff installs its own output_message after
// this, so its JPEG warnings still go through its (captured) handlers.
// TurboJPEG, used for JPEG files themselves, has its own internal copy and is not affected.
namespace {
void swallow_libjpeg_message(j_common_ptr) {}
using StdError = jpeg_error_mgr* (*)(jpeg_error_mgr*);
}  // namespace

extern "C" jpeg_error_mgr* jpeg_std_error(jpeg_error_mgr* err) {
  static const StdError real = reinterpret_cast<StdError>(dlsym(RTLD_NEXT, "jpeg_std_error"));
  if (!real) std::abort();  // only reachable from a library that links libjpeg, so it is loaded
  real(err);
  err->output_message = swallow_libjpeg_message;
  return err;
}


namespace qvl::detail {
namespace {

thread_local std::string t_first_poppler_message;

void capture_poppler_message(const std::string& message, void*) {
  if (t_first_poppler_message.empty()) {
    t_first_poppler_message = message.rfind("error: ", 0) == 0 ? message.substr(7) : message;
    for (char& c : t_first_poppler_message)
      if (c == '\n' || c == '\r') c = ' ';
  }
}

void silence_poppler() {
  static std::once_flag once;
  std::call_once(once, [] { poppler::set_debug_error_function(capture_poppler_message, nullptr); });
}

std::string poppler_reason() {
  return t_first_poppler_message.empty() ? "" : ": " + t_first_poppler_message;
}

constexpr int kMaxPdfDpi = 1200;

// Opens the document; refuses what cannot be read or is locked by a password.
std::unique_ptr<poppler::document> open_pdf(const uint8_t* data, size_t size, const std::string& name,
                                            const ImageLimits& limits, int* pages) {
  silence_poppler();
  t_first_poppler_message.clear();
  if (size > size_t(INT_MAX)) throw Error(fmt::format("{}: PDF file too large ({} bytes)", name, size));
  // poppler reads the bytes in place (no copy); they outlive the document.
  std::unique_ptr<poppler::document> doc(
      poppler::document::load_from_raw_data(reinterpret_cast<const char*>(data), int(size)));
  if (!doc) {
    // poppler says "Incorrect password" for a user-password file before it fails.
    if (t_first_poppler_message.find("password") != std::string::npos)
      throw Error(fmt::format("{}: PDF is encrypted with a password; qvl cannot open it", name));
    throw Error(fmt::format("{}: invalid or damaged PDF{}", name, poppler_reason()));
  }
  if (doc->is_locked())
    throw Error(fmt::format("{}: PDF is encrypted with a password; qvl cannot open it", name));
  *pages = doc->pages();
  if (*pages <= 0) throw Error(fmt::format("{}: PDF has no readable pages{}", name, poppler_reason()));
  if (*pages > limits.max_pages)
    throw Error(fmt::format("{}: PDF has {} pages, over the limit of {} pages", name, *pages, limits.max_pages));
  return doc;
}

}  // namespace

int pdf_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits) {
  int pages = 0;
  open_pdf(data, size, name, limits, &pages);
  return pages;
}

RgbImage decode_pdf(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    const DecodeRequest& request) {
  const int dpi = request.pdf_dpi == 0 ? kDefaultPdfDpi : request.pdf_dpi;
  if (dpi < 1 || dpi > kMaxPdfDpi)
    throw Error(fmt::format("{}: PDF resolution {} dpi is out of range (1 to {})", name, dpi, kMaxPdfDpi));
  int pages = 0;
  const std::unique_ptr<poppler::document> doc = open_pdf(data, size, name, limits, &pages);
  check_page(request.page, pages, name);
  const std::unique_ptr<poppler::page> page(doc->create_page(request.page - 1));
  if (!page) throw Error(fmt::format("{}: cannot read PDF page {}{}", name, request.page, poppler_reason()));

  // The renderer draws the crop box, turned by /Rotate; Splash rounds each side to whole pixels.
  const poppler::rectf box = page->page_rect(poppler::crop_box);
  double width_pt = box.width(), height_pt = box.height();
  const poppler::page::orientation_enum turn = page->orientation();
  if (turn == poppler::page::landscape || turn == poppler::page::seascape) std::swap(width_pt, height_pt);
  const double width_px = std::floor(width_pt * dpi / 72.0 + 0.5);
  const double height_px = std::floor(height_pt * dpi / 72.0 + 0.5);
  if (!std::isfinite(width_px) || !std::isfinite(height_px) || width_px < 1 || height_px < 1)
    throw Error(fmt::format("{}: PDF page {} has an invalid size ({} x {} points)", name, request.page, width_pt,
                            height_pt));
  if (width_px * height_px > double(limits.max_pixels))
    throw Error(fmt::format("{}: PDF page {} at {} dpi would be {:.0f}x{:.0f} = {:.0f} pixels, over the limit of {} "
                            "pixels (use a lower dpi)",
                            name, request.page, dpi, width_px, height_px, width_px * height_px, limits.max_pixels));

  poppler::page_renderer renderer;
  renderer.set_render_hint(poppler::page_renderer::antialiasing, true);
  renderer.set_render_hint(poppler::page_renderer::text_antialiasing, true);
  renderer.set_image_format(poppler::image::format_rgb24);
  renderer.set_paper_color(0xffffffff);
  const poppler::image rendered = renderer.render_page(page.get(), dpi, dpi);
  if (!rendered.is_valid())
    throw Error(fmt::format("{}: cannot render PDF page {}{}", name, request.page, poppler_reason()));
  const int64_t w = rendered.width(), h = rendered.height();
  check_pixel_limit(w, h, name, limits);  // what was checked above, unless poppler sized it otherwise

  RgbImage image;
  image.width = w;
  image.height = h;
  image.pixels.resize(size_t(w * h * 3));
  const char* rows = rendered.const_data();
  const int64_t stride = rendered.bytes_per_row();
  for (int64_t y = 0; y < h; ++y) std::memcpy(image.at(0, y), rows + y * stride, size_t(w * 3));
  return image;
}

}  // namespace qvl::detail
