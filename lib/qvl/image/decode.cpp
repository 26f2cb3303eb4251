#include "qvl/image/decode.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/image/format_decoders.h"
#include "qvl/image/orientation.h"

namespace qvl {
namespace {

bool starts_with(const uint8_t* data, size_t size, const char* magic, size_t n) {
  return size >= n && std::memcmp(data, magic, n) == 0;
}

// Formats people will try that we do not read, so the error can say what the file is.
const char* unsupported_format_name(const uint8_t* data, size_t size) {
  if (size >= 12 && std::memcmp(data + 4, "ftyp", 4) == 0) return "HEIF/AVIF";
  if (starts_with(data, size, "\x00\x00\x00\x0cjP  ", 8) || starts_with(data, size, "\xFF\x4F\xFF\x51", 4))
    return "JPEG 2000";
  return nullptr;
}

// Closes the descriptor on every path out of decode_image_file.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

namespace detail {
void check_pixel_limit(int64_t width, int64_t height, const std::string& name, const ImageLimits& limits) {
  if (width <= 0 || height <= 0)
    throw Error(fmt::format("{}: image declares an empty size {}x{}", name, width, height));
  // Compare by division so that absurd header values cannot overflow.
  if (width > limits.max_pixels / height)
    throw Error(fmt::format("{}: image is {}x{} = {} pixels, over the limit of {} pixels", name, width, height,
                            width * height, limits.max_pixels));
}

void check_page(int page, int pages, const std::string& name) {
  if (page < 1 || page > pages)
    throw Error(fmt::format("{}: page {} requested, but the file has {} page{}", name, page, pages,
                            pages == 1 ? "" : "s"));
}
}  // namespace detail

ImageFormat detect_image_format(const uint8_t* data, size_t size) {
  if (starts_with(data, size, "\x89PNG\r\n\x1a\n", 8)) return ImageFormat::Png;
  if (starts_with(data, size, "\xFF\xD8\xFF", 3)) return ImageFormat::Jpeg;
  if (starts_with(data, size, "RIFF", 4) && size >= 12 && std::memcmp(data + 8, "WEBP", 4) == 0)
    return ImageFormat::Webp;
  // Classic TIFF and BigTIFF, both byte orders.
  if (starts_with(data, size, "II*\0", 4) || starts_with(data, size, "MM\0*", 4) ||
      starts_with(data, size, "II+\0", 4) || starts_with(data, size, "MM\0+", 4))
    return ImageFormat::Tiff;
  if (starts_with(data, size, "GIF87a", 6) || starts_with(data, size, "GIF89a", 6)) return ImageFormat::Gif;
  if (starts_with(data, size, "BM", 2) && size >= 14) return ImageFormat::Bmp;
  // PDF readers accept the header anywhere in the first 1024 bytes; so does poppler.
  const size_t head = size < 1024 ? size : 1024;
  for (size_t i = 0; i + 5 <= head; ++i)
    if (std::memcmp(data + i, "%PDF-", 5) == 0) return ImageFormat::Pdf;
  return ImageFormat::Unknown;
}

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::Png: return "png";
    case ImageFormat::Jpeg: return "jpeg";
    case ImageFormat::Webp: return "webp";
    case ImageFormat::Tiff: return "tiff";
    case ImageFormat::Bmp: return "bmp";
    case ImageFormat::Gif: return "gif";
    case ImageFormat::Pdf: return "pdf";
    default: return "unknown";
  }
}

namespace {
[[noreturn]] void throw_unknown_format(const uint8_t* data, size_t size, const std::string& name) {
  if (const char* other = unsupported_format_name(data, size))
    throw Error(fmt::format("{}: {} images are not supported (PNG, JPEG, WebP, TIFF, BMP, GIF and PDF are)", name,
                            other));
  // Keeps the wording of the PNG/JPEG-only days ("not a PNG or JPEG image"), which scripts may match.
  throw Error(fmt::format("{}: not a PNG or JPEG image, nor WebP, TIFF, BMP, GIF or PDF (unrecognized first bytes)",
                          name));
}
}  // namespace

RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                      const DecodeRequest& request) {
  if (size == 0) throw Error(fmt::format("{}: file is empty (0 bytes), not an image", name));
  const ImageFormat format = detect_image_format(data, size);
  if (format == ImageFormat::Unknown) throw_unknown_format(data, size, name);
  if (request.page < 1) throw Error(fmt::format("{}: page {} requested; pages count from 1", name, request.page));
  const bool has_pages = format == ImageFormat::Tiff || format == ImageFormat::Pdf;
  if (!has_pages) detail::check_page(request.page, 1, name);
  int orientation = 1;
  RgbImage image;
  switch (format) {
    case ImageFormat::Png: image = detail::decode_png(data, size, name, limits, &orientation); break;
    case ImageFormat::Jpeg: image = detail::decode_jpeg(data, size, name, limits, request, &orientation); break;
    case ImageFormat::Webp: image = detail::decode_webp(data, size, name, limits, &orientation); break;
    case ImageFormat::Tiff: image = detail::decode_tiff(data, size, name, limits, request, &orientation); break;
    case ImageFormat::Bmp: image = detail::decode_bmp(data, size, name, limits); break;
    case ImageFormat::Gif: image = detail::decode_gif(data, size, name, limits); break;
    case ImageFormat::Pdf: image = detail::decode_pdf(data, size, name, limits, request); break;
    default: throw_unknown_format(data, size, name);
  }
  return apply_orientation(std::move(image), orientation);
}

ReadablePages image_readable_pages(const uint8_t* data, size_t size, const std::string& name,
                                   const ImageLimits& limits) {
  if (size == 0) throw Error(fmt::format("{}: file is empty (0 bytes), not an image", name));
  ReadablePages pages;
  switch (detect_image_format(data, size)) {
    case ImageFormat::Unknown: throw_unknown_format(data, size, name);
    case ImageFormat::Tiff: pages.count = detail::tiff_page_count(data, size, name, limits, &pages.damage); break;
    case ImageFormat::Pdf: pages.count = detail::pdf_page_count(data, size, name, limits); break;
    default: pages.count = 1;
  }
  return pages;
}

int image_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits) {
  const ReadablePages pages = image_readable_pages(data, size, name, limits);
  if (!pages.damage.empty()) throw Error(pages.damage);
  return pages.count;
}

RgbImage decode_image_file(const std::string& path, const ImageLimits& limits, const DecodeRequest& request) {
  const std::vector<uint8_t> bytes = read_image_bytes(path, limits);
  return decode_image(bytes.data(), bytes.size(), path, limits, request);
}

std::vector<uint8_t> read_image_bytes(const std::string& path, const ImageLimits& limits) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("{}: cannot open image: {}", path, std::strerror(errno)));
  // A FIFO, socket or device is refused before anything opens it for reading.
  FileDescriptor file{open_regular_file(path)};
  if (::fstat(file.fd, &st) != 0) throw Error(fmt::format("{}: cannot stat image: {}", path, std::strerror(errno)));
  if (st.st_size > limits.max_file_bytes)
    throw Error(fmt::format("{}: file is {} bytes, over the image file limit of {} bytes", path,
                            int64_t(st.st_size), limits.max_file_bytes));
  std::vector<uint8_t> bytes(size_t(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(file.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("{}: read failed: {}", path, std::strerror(errno)));
    if (n == 0) break;  // the file shrank while we read it: decode what is there, truncation is caught below
    done += size_t(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace qvl
