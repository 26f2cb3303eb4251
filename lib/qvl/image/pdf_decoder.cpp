// PDF with poppler-cpp: a page is rendered (Splash, anti-aliased shapes and
// text, as pdftoppm does by default) at DecodeRequest::pdf_dpi to RGB on white.
// The size the page will have, from its crop box, /Rotate and the dpi, is checked
// against ImageLimits::max_pixels before anything is rendered.
//
// poppler-cpp cannot be interrupted, and a few kilobytes of nested drawing
// can keep it busy for hours or crash it. With ImageLimits::page_timeout_s a
// page is therefore rendered in a forked child process into memory shared with
// this one; a child that takes too long is killed, and one that dies takes only
// that page with it.
//
// poppler reports syntax errors and warnings through a process-wide debug
// function that prints to stderr by default; ours keeps the first message of the
// current thread for the error text instead.
#include <dlfcn.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <poppler-document.h>
#include <poppler-global.h>
#include <poppler-image.h>
#include <poppler-page-renderer.h>
#include <poppler-page.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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

// Held around all of this file's poppler calls: a child forked while another
// thread was inside poppler (or fontconfig below it) could inherit one of its
// locks held, and would hang on it.
std::mutex& poppler_mutex() {
  static std::mutex mutex;
  return mutex;
}

poppler::image render_with_poppler(poppler::page& page, int dpi) {
  poppler::page_renderer renderer;
  renderer.set_render_hint(poppler::page_renderer::antialiasing, true);
  renderer.set_render_hint(poppler::page_renderer::text_antialiasing, true);
  renderer.set_image_format(poppler::image::format_rgb24);
  renderer.set_paper_color(0xffffffff);
  return renderer.render_page(&page, dpi, dpi);
}

// Copies poppler's rows (padded to bytes_per_row) into tight RGB rows.
void copy_rows(const poppler::image& rendered, uint8_t* out) {
  const int64_t w = rendered.width(), h = rendered.height();
  const char* rows = rendered.const_data();
  const int64_t stride = rendered.bytes_per_row();
  for (int64_t y = 0; y < h; ++y) std::memcpy(out + y * w * 3, rows + y * stride, size_t(w * 3));
}

RgbImage render_here(poppler::page& page, int dpi, const ImageLimits& limits, const std::string& name,
                     int page_number) {
  const poppler::image rendered = render_with_poppler(page, dpi);
  if (!rendered.is_valid())
    throw Error(fmt::format("{}: cannot render PDF page {}{}", name, page_number, poppler_reason()));
  // What decode_pdf checked, unless poppler sized the page otherwise.
  check_pixel_limit(rendered.width(), rendered.height(), name, limits);
  RgbImage image;
  image.width = rendered.width();
  image.height = rendered.height();
  image.pixels.resize(size_t(image.width * image.height * 3));
  copy_rows(rendered, image.pixels.data());
  return image;
}

// What the child leaves at the start of the shared mapping; the pixels follow.
struct ChildRender {
  enum Status : int32_t { kNotDone = 0, kRendered, kFailed, kTooLarge };
  Status status;
  int32_t width, height;
  char message[500];  // poppler's first message, for a failed render
};

// The child's whole life: render, copy into the shared mapping, _exit. It
// calls only poppler, memcpy and _exit (no exit handlers, no OpenMP, no torch).
[[noreturn]] void child_render(poppler::page& page, int dpi, ChildRender* out, uint8_t* pixels,
                               int64_t capacity_pixels, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl
  try {
    t_first_poppler_message.clear();
    const poppler::image rendered = render_with_poppler(page, dpi);
    if (!rendered.is_valid()) {
      std::snprintf(out->message, sizeof out->message, "%s", poppler_reason().c_str());
      out->status = ChildRender::kFailed;
      ::_exit(0);
    }
    out->width = rendered.width();
    out->height = rendered.height();
    if (int64_t(out->width) * out->height > capacity_pixels) {
      out->status = ChildRender::kTooLarge;
      ::_exit(0);
    }
    copy_rows(rendered, pixels);
    out->status = ChildRender::kRendered;
  } catch (...) {
    out->status = ChildRender::kFailed;
  }
  ::_exit(0);
}

// Waits until the child's end of `done_fd` closes (it exited or died) or the
// timeout passes; true when it ended in time.
bool wait_for_child(int done_fd, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  for (;;) {
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - Clock::now()).count();
    if (left_ms <= 0) return false;
    pollfd fd{done_fd, POLLIN, 0};
    const int ready = ::poll(&fd, 1, int(std::min(left_ms + 1, double(INT_MAX))));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

// Unmaps and closes on every way out of render_in_child.
struct ChildResources {
  void* mapping = MAP_FAILED;
  size_t mapping_bytes = 0;
  int done_fds[2] = {-1, -1};
  ~ChildResources() {
    if (mapping != MAP_FAILED) ::munmap(mapping, mapping_bytes);
    for (int fd : done_fds)
      if (fd >= 0) ::close(fd);
  }
};

// Renders in a child process (see the top of the file); the mapping holds up to
// the expected size plus a pixel of rounding each way.
RgbImage render_in_child(poppler::page& page, int dpi, int64_t expected_width, int64_t expected_height,
                         const ImageLimits& limits, const std::string& name, int page_number) {
  const double timeout_s = limits.page_timeout_s;
  const int64_t capacity_pixels = (expected_width + 1) * (expected_height + 1);
  ChildResources res;
  res.mapping_bytes = sizeof(ChildRender) + size_t(capacity_pixels) * 3;
  res.mapping = ::mmap(nullptr, res.mapping_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (res.mapping == MAP_FAILED || ::pipe2(res.done_fds, O_CLOEXEC) != 0)
    throw Error(fmt::format("{}: cannot prepare to render PDF page {}: {}", name, page_number, std::strerror(errno)));
  auto* result = static_cast<ChildRender*>(res.mapping);
  uint8_t* pixels = static_cast<uint8_t*>(res.mapping) + sizeof(ChildRender);

  // _Fork, not fork: fork runs the libraries' atfork handlers, and
  // OpenBLAS's tears down its thread pool even while another thread waits in
  // a GEMM on it (that thread then waits for ever). The child needs none of
  // them: it allocates only in this thread's malloc arena and uses no threads.
  const pid_t parent = ::getpid();
  const pid_t pid = ::_Fork();
  if (pid < 0) throw Error(fmt::format("{}: cannot start rendering PDF page {}: {}", name, page_number, std::strerror(errno)));
  if (pid == 0) {
    ::close(res.done_fds[0]);
    child_render(page, dpi, result, pixels, capacity_pixels, parent);
  }
  ::close(res.done_fds[1]);
  res.done_fds[1] = -1;
  const bool ended = wait_for_child(res.done_fds[0], timeout_s);
  if (!ended) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!ended)
    throw Error(fmt::format("{}: PDF page {} takes longer than {} s to render (see --page-timeout)", name,
                            page_number, timeout_s));
  if (WIFSIGNALED(status))
    throw Error(fmt::format("{}: the PDF renderer crashed on page {} (signal {})", name, page_number,
                            WTERMSIG(status)));
  if (result->status == ChildRender::kTooLarge)
    throw Error(fmt::format("{}: PDF page {} rendered as {}x{} pixels, not the {}x{} its size says", name,
                            page_number, result->width, result->height, expected_width, expected_height));
  if (result->status != ChildRender::kRendered) {
    result->message[sizeof result->message - 1] = '\0';
    throw Error(fmt::format("{}: cannot render PDF page {}{}", name, page_number, result->message));
  }
  check_pixel_limit(result->width, result->height, name, limits);
  RgbImage image;
  image.width = result->width;
  image.height = result->height;
  image.pixels.assign(pixels, pixels + size_t(image.width * image.height * 3));
  return image;
}

// poppler gives a page whose MediaBox it cannot use ([0 0 0 0], fewer than four
// numbers, a number it cannot parse such as 1e30, or none at all) the US Letter
// size without a word, and poppler-cpp does not say where a page's size came
// from. So a page poppler makes exactly Letter is believed only if the file
// spells out a Letter-sized box (or hides its boxes where we cannot look: in
// object streams, or behind references); otherwise the size is a guess, and an
// answer about a guessed page would be silently wrong.
bool is_poppler_default_box(const poppler::rectf& box) {
  return box.x() == 0 && box.y() == 0 && box.width() == 612 && box.height() == 792;
}

// A PDF number as poppler reads one: a sign, digits and at most one point; no exponent.
bool parse_pdf_number(const std::string& token, double* value) {
  size_t digits = 0, points = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    const char c = token[i];
    if (c >= '0' && c <= '9') ++digits;
    else if (c == '.') ++points;
    else if (!((c == '-' || c == '+') && i == 0)) return false;
  }
  if (digits == 0 || points > 1) return false;
  *value = std::strtod(token.c_str(), nullptr);
  return std::isfinite(*value);
}

// The text after a "/MediaBox" key: an array up to its "]", or a short run up
// to the next key, whichever the file has.
std::string box_text_at(const char* at, const char* end) {
  while (at < end && std::isspace(static_cast<unsigned char>(*at))) ++at;
  const char* stop = at;
  const char closing = at < end && *at == '[' ? ']' : '/';
  while (stop < end && stop - at < 200 && *stop != closing && *stop != '>') ++stop;
  if (closing == ']' && stop < end && *stop == ']') ++stop;
  std::string text(at, stop);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

// Whether a box's text reads, as poppler would read it, as four numbers, not all zero.
bool read_box(const std::string& text, double* width, double* height) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return false;
  std::vector<double> numbers;
  size_t at = 1;
  while (at < text.size() - 1) {
    const size_t start = text.find_first_not_of(" \t\r\n\f", at);
    if (start >= text.size() - 1) break;
    const size_t stop = std::min(text.find_first_of(" \t\r\n\f]", start), text.size() - 1);
    double value = 0;
    if (!parse_pdf_number(text.substr(start, stop - start), &value)) return false;
    numbers.push_back(value);
    at = stop;
  }
  if (numbers.size() != 4 || (numbers[0] == 0 && numbers[1] == 0 && numbers[2] == 0 && numbers[3] == 0)) return false;
  *width = std::fabs(numbers[2] - numbers[0]);
  *height = std::fabs(numbers[3] - numbers[1]);
  return true;
}

// Empty when the file may well hold the Letter box poppler gave a page; else
// what the file says instead (its first unusable box, or that it has none).
std::string guessed_page_size(const uint8_t* data, size_t size) {
  const char* begin = reinterpret_cast<const char*>(data);
  const char* end = begin + size;
  const std::string key = "/MediaBox", object_stream = "/ObjStm";
  std::string first_unusable;
  bool any = false;
  for (const char* at = std::search(begin, end, key.begin(), key.end()); at != end;
       at = std::search(at + key.size(), end, key.begin(), key.end())) {
    any = true;
    const std::string text = box_text_at(at + key.size(), end);
    double width = 0, height = 0;
    if (text.empty() || text.front() != '[') return "";  // a reference: poppler may have read anything
    if (!read_box(text, &width, &height)) {
      if (first_unusable.empty()) first_unusable = text;
    } else if (width == 612 && height == 792) {
      return "";
    }
  }
  // Checked last: a Letter page usually says so early, and this reads the whole file.
  if (std::search(begin, end, object_stream.begin(), object_stream.end()) != end) return "";
  if (!any) return "the file has none";
  return first_unusable.empty() ? "the page has none" : first_unusable;
}

}  // namespace

int pdf_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits) {
  const std::lock_guard<std::mutex> lock(poppler_mutex());
  int pages = 0;
  open_pdf(data, size, name, limits, &pages);
  return pages;
}

RgbImage decode_pdf(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    const DecodeRequest& request) {
  const int dpi = request.pdf_dpi == 0 ? kDefaultPdfDpi : request.pdf_dpi;
  if (dpi < 1 || dpi > kMaxPdfDpi)
    throw Error(fmt::format("{}: PDF resolution {} dpi is out of range (1 to {})", name, dpi, kMaxPdfDpi));
  const std::lock_guard<std::mutex> lock(poppler_mutex());
  int pages = 0;
  const std::unique_ptr<poppler::document> doc = open_pdf(data, size, name, limits, &pages);
  check_page(request.page, pages, name);
  const std::unique_ptr<poppler::page> page(doc->create_page(request.page - 1));
  if (!page) throw Error(fmt::format("{}: cannot read PDF page {}{}", name, request.page, poppler_reason()));

  if (is_poppler_default_box(page->page_rect(poppler::media_box))) {
    const std::string instead = guessed_page_size(data, size);
    if (!instead.empty())
      throw Error(fmt::format("{}: PDF page {} has no usable MediaBox ({}); qvl will not guess its size", name,
                              request.page, instead));
  }
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

  if (limits.page_timeout_s > 0)
    return render_in_child(*page, dpi, int64_t(width_px), int64_t(height_px), limits, name, request.page);
  return render_here(*page, dpi, limits, name, request.page);
}

}  // namespace qvl::detail
