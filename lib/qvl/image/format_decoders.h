// The per-format decoders behind decode_image (internal to qvl/image).
// Each returns the image as stored, before the EXIF orientation is applied, and
// reports that orientation (1 = as stored) through `orientation`.
// Formats with pages (TIFF directories, PDF pages) take the 1-based page from
// the request (decode_image has checked it is >= 1) and count them separately.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "qvl/image/decode.h"

namespace qvl::detail {

RgbImage decode_png(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    int* orientation);
RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     const DecodeRequest& request, int* orientation);
RgbImage decode_webp(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     int* orientation);
RgbImage decode_tiff(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                     const DecodeRequest& request, int* orientation);
RgbImage decode_bmp(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits);
RgbImage decode_gif(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits);
RgbImage decode_pdf(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    const DecodeRequest& request);

// The directories before a loop in their chain, if any; `loop` gets the error for the loop or "".
int tiff_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits,
                    std::string* loop);
int pdf_page_count(const uint8_t* data, size_t size, const std::string& name, const ImageLimits& limits);

// Throws the standard "too many pixels" error before anything is allocated.
void check_pixel_limit(int64_t width, int64_t height, const std::string& name, const ImageLimits& limits);

// Throws "page N requested, but the file has M page(s)".
void check_page(int page, int pages, const std::string& name);

}  // namespace qvl::detail
