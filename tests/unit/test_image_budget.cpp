// The image-token budget and shrink to fit (image/image_budget.h). Expected
// sizes and token counts are the reference's smart_resize (transformers'
// Qwen2VL image processor, factor 32) evaluated in Python for these inputs,
// not values read back from qvl.
#include <doctest/doctest.h>

#include "qvl/error.h"
#include "qvl/image/image_budget.h"
#include "qvl/image/preprocess.h"

using namespace qvl;

namespace {

PreprocessorConfig published() {
  PreprocessorConfig cfg;  // Qwen3-VL: patch 16, merge 2, 65536 .. 16777216 pixels
  cfg.min_pixels = 65536;
  cfg.max_pixels = 16777216;
  return cfg;
}

}  // namespace

TEST_CASE("one image token is one 32x32 merge window") { CHECK(pixels_per_image_token(published()) == 1024); }

TEST_CASE("apply_image_bounds: the tightest upper bound wins") {
  const PreprocessorConfig base = published();
  PreprocessorConfig c = apply_image_bounds(base, {});
  CHECK(c.min_pixels == 65536);
  CHECK(c.max_pixels == 16777216);

  c = apply_image_bounds(base, {0, 0, 1024});
  CHECK(c.max_pixels == 1024 * 1024);
  CHECK(c.min_pixels == 65536);

  c = apply_image_bounds(base, {0, 200704, 1024});  // --max-pixels tighter than the budget
  CHECK(c.max_pixels == 200704);
  c = apply_image_bounds(base, {0, 4000000, 1024});  // the budget tighter than --max-pixels
  CHECK(c.max_pixels == 1048576);

  // A budget beyond the config's bound is no bound (and 2^18 tokens does not overflow).
  c = apply_image_bounds(base, {0, 0, int64_t(1) << 18});
  CHECK(c.max_pixels == 16777216);
}

TEST_CASE("apply_image_bounds: min_pixels against a small budget") {
  const PreprocessorConfig base = published();
  // The config's minimum yields to a budget below it.
  PreprocessorConfig c = apply_image_bounds(base, {0, 0, 32});
  CHECK(c.max_pixels == 32768);
  CHECK(c.min_pixels == 32768);
  // An explicit --min-pixels wins over the budget.
  c = apply_image_bounds(base, {100000, 0, 32});
  CHECK(c.min_pixels == 100000);
  CHECK(c.max_pixels == 100000);
  // ... but not over an explicit or the config's max_pixels.
  CHECK_THROWS_WITH_AS(apply_image_bounds(base, {9000, 8000, 0}),
                       doctest::Contains("min_pixels 9000 is larger than max_pixels 8000"), Error);
  CHECK_THROWS_AS(apply_image_bounds(base, {20000000, 0, 0}), Error);
}

TEST_CASE("a 4032x3024 phone photo under each budget") {
  struct Case {
    int64_t budget, tokens, height, width;
  };
  // Reference: smart_resize(3024, 4032, 32, 65536, budget * 1024).
  const Case cases[] = {{256, 234, 416, 576},     {512, 494, 608, 832},     {768, 768, 768, 1024},
                        {1024, 972, 864, 1152},   {1536, 1485, 1056, 1440}, {2048, 2028, 1248, 1664},
                        {4096, 4015, 1760, 2336}};
  for (const Case& k : cases) {
    CAPTURE(k.budget);
    const PreprocessorConfig c = apply_image_bounds(published(), {0, 0, k.budget});
    CHECK(image_tokens_for(3024, 4032, c) == k.tokens);
    const ResizedSize r = smart_resize(3024, 4032, 32, c.min_pixels, c.max_pixels);
    CHECK(r.height == k.height);
    CHECK(r.width == k.width);
    CHECK(k.tokens <= k.budget);
  }
  // Without a budget: 3008x4032, 11844 tokens (what issue 12 saw).
  CHECK(image_tokens_for(3024, 4032, published()) == 11844);
  // Portrait: the same count, sides swapped.
  CHECK(image_tokens_for(4032, 3024, apply_image_bounds(published(), {0, 0, 1024})) == 972);
  // An A4 page at 150 dpi (1240x1754) under the ocr and the ask budgets.
  CHECK(image_tokens_for(1754, 1240, apply_image_bounds(published(), {0, 0, 2048})) == 2014);
  CHECK(image_tokens_for(1754, 1240, apply_image_bounds(published(), {0, 0, 1024})) == 988);
}

TEST_CASE("max_pixels_to_fit: the largest common cap that fits") {
  const PreprocessorConfig c = apply_image_bounds(published(), {0, 0, 1024});
  // (width, height): a 12 MP photo (972 tokens at 1024), 1024x768 (768), 96x64 (scaled up to 70).
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{4032, 3024}, {1024, 768}, {96, 64}};
  // Everything fits: the bound is kept.
  CHECK(max_pixels_to_fit(sizes, c, 1810) == c.max_pixels);
  // 1179 tokens: a cap of 587 tokens gives 540 + 540 + 70 = 1150; 588 would give 588 + 588 + 70 = 1246.
  const std::optional<int64_t> cap = max_pixels_to_fit(sizes, c, 1179);
  REQUIRE(cap);
  CHECK(*cap == 587 * 1024);
  PreprocessorConfig fitted = c;
  fitted.max_pixels = *cap;
  CHECK(image_tokens_for(3024, 4032, fitted) == 540);
  CHECK(image_tokens_for(768, 1024, fitted) == 540);
  CHECK(image_tokens_for(64, 96, fitted) == 70);  // small images keep their size
  // At min_pixels (a cap of 64 tokens) they need 54 + 54 + 70 = 178 tokens, and a cap of 65 as well
  // (66 gives more); 177 is too few.
  CHECK(max_pixels_to_fit(sizes, c, 178) == 65 * 1024);
  CHECK_FALSE(max_pixels_to_fit(sizes, c, 177));
  // Two photos, landscape and portrait, into 1500 tokens: 767 tokens each at most, 1426 in all.
  const std::vector<std::pair<int64_t, int64_t>> two = {{4032, 3024}, {3024, 4032}};
  const std::optional<int64_t> cap2 = max_pixels_to_fit(two, c, 1500);
  REQUIRE(cap2);
  CHECK(*cap2 == 767 * 1024);
  // No image: nothing to fit.
  CHECK(max_pixels_to_fit({}, c, 0) == c.max_pixels);
}
