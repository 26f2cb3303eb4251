// How large an image may stay: preprocessor_config.json's pixel bounds, the
// user's flags and a budget of image tokens for a CPU, combined; and the
// smaller budget that makes a prompt's images fit the context.
//
// The published config lets an image keep up to 16.7 M pixels (11,844 tokens
// for a 12 MP phone photo): minutes of vision encoding and prefill on a CPU,
// and more than the default context. qvl's commands therefore start from a
// budget of image tokens (docs/PERFORMANCE.md, "Image budget": time to first
// token against image tokens). The resize itself stays the reference's
// smart_resize: a budget only lowers its max_pixels.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qvl/model/config.h"

namespace qvl {

// ask, chat, bench, image-info: keeps a question about a photo interactive.
constexpr int64_t kDefaultImageTokens = 1024;
// ocr: small print needs more pixels, and a batch job can wait longer per page.
constexpr int64_t kDefaultOcrImageTokens = 2048;

// Pixels of the resized image behind one image token: one merge window,
// (patch_size * merge_size)^2 (1024 for Qwen3-VL).
int64_t pixels_per_image_token(const PreprocessorConfig& cfg);

// Bounds on the resized area beyond preprocessor_config.json's; 0: not given.
struct ImageBounds {
  int64_t min_pixels = 0;
  int64_t max_pixels = 0;
  int64_t max_image_tokens = 0;  // max_pixels <= max_image_tokens * pixels_per_image_token
};

// `cfg` with the bounds applied. The tightest upper bound wins (the config's
// max_pixels, max_pixels, max_image_tokens), except that an explicit
// min_pixels beats the token budget; min_pixels above an explicit or the
// config's max_pixels is an error. A config min_pixels above the budget is
// lowered to it, so a small budget works as asked.
PreprocessorConfig apply_image_bounds(PreprocessorConfig cfg, const ImageBounds& bounds);

// Image tokens an image of this size gets under `cfg` (smart_resize's grid).
int64_t image_tokens_for(int64_t height, int64_t width, const PreprocessorConfig& cfg);

// Shrink to fit. The largest max_pixels, a whole number of image tokens between
// cfg.min_pixels and cfg.max_pixels, with which all the images (sizes as
// (width, height)) together get at most `available_tokens` image tokens;
// nullopt when they do not fit even at cfg.min_pixels. With it in cfg.max_pixels
// every image gets the same cap: small images keep their size, large ones give
// up pixels.
std::optional<int64_t> max_pixels_to_fit(const std::vector<std::pair<int64_t, int64_t>>& sizes,
                                         const PreprocessorConfig& cfg, int64_t available_tokens);

}  // namespace qvl
