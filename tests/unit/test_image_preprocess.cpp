// The processor's resize and patch order against the reference goldens, and
// smart_resize on its edge cases.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>

#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/image/resize.h"
#include "qvl/io/safetensors.h"
#include "test_support.h"

using namespace qvl;

namespace {

// The settings goldens_processor.safetensors was made with (FIXTURES.md).
PreprocessorConfig config_for(const std::string& setting) {
  PreprocessorConfig cfg;  // patch 16, merge 2, T 2, mean/std 0.5: the reference's values
  cfg.min_pixels = 65536;
  cfg.max_pixels = setting == "max_pixels_200k" ? 200704 : 16777216;
  return cfg;
}

struct Comparison {
  size_t differ = 0, off_by_more_than_one = 0;
};

Comparison compare(const std::vector<uint8_t>& got, const uint8_t* want) {
  Comparison c;
  for (size_t i = 0; i < got.size(); ++i) {
    const int d = std::abs(int(got[i]) - int(want[i]));
    c.differ += d != 0;
    c.off_by_more_than_one += d > 1;
  }
  return c;
}

}  // namespace

TEST_CASE("processor pixels and grids equal the reference goldens for every case") {
  SafetensorsFile goldens(test::data_path("goldens_processor.safetensors"));
  const auto& cases = test::goldens()["processor"]["cases"];
  REQUIRE(cases.size() >= 8);
  for (const auto& c : cases) {
    const std::string image = c["image"], setting = c["setting"];
    CAPTURE(image);
    CAPTURE(setting);
    PreprocessorConfig cfg = config_for(setting);
    CHECK(cfg.min_pixels == c["size"]["shortest_edge"].get<int64_t>());
    CHECK(cfg.max_pixels == c["size"]["longest_edge"].get<int64_t>());

    const RgbImage decoded = decode_image_file(test::data_path("images/" + image));
    const ResizedSize size = smart_resize(decoded.height, decoded.width, 32, cfg.min_pixels, cfg.max_pixels);
    const RgbImage resized = resize_bicubic_antialias(decoded, size.width, size.height);
    ImageGrid grid;
    const std::vector<uint8_t> u8 = patchify_u8(resized, cfg, &grid);

    // Grid: against goldens.json and against the safetensors golden.
    const auto& thw = c["fast_grid_thw"][0];
    CHECK(grid.t == thw[0].get<int64_t>());
    CHECK(grid.h == thw[1].get<int64_t>());
    CHECK(grid.w == thw[2].get<int64_t>());
    CHECK(c["slow_grid_thw"] == c["fast_grid_thw"]);
    const TensorView& want_grid = goldens.get(setting + "." + image + ".grid_thw");
    CHECK(want_grid.as<int64_t>()[0] == grid.t);
    CHECK(want_grid.as<int64_t>()[1] == grid.h);
    CHECK(want_grid.as<int64_t>()[2] == grid.w);

    const TensorView& want = goldens.get(setting + "." + image + ".pixel_u8");
    REQUIRE(want.shape == std::vector<int64_t>{grid.patches(), 1536});
    CHECK(c["fast_shape"][0].get<int64_t>() == grid.patches());
    REQUIRE(u8.size() == want.nbytes);
    const Comparison diff = compare(u8, want.as<uint8_t>());
    CHECK(diff.differ == 0);  // FIXTURES.md: exact (at worst ±1 on ≤0.1% would be tolerated)
    CHECK(diff.off_by_more_than_one == 0);
  }
}

TEST_CASE("preprocess_image normalizes to (x/255 - 0.5) / 0.5 of the golden bytes") {
  SafetensorsFile goldens(test::data_path("goldens_processor.safetensors"));
  const RgbImage img = decode_image_file(test::data_path("images/photo.jpg"));
  const TensorView& want = goldens.get("default.photo.jpg.pixel_u8");
  // As decoded (resized to 320x256), and already at 320x256, where preprocessing skips the resize.
  REQUIRE(!(img.width == 320 && img.height == 256));
  const RgbImage at_target_size = resize_bicubic_antialias(img, 320, 256);
  for (const RgbImage* input : {&img, &at_target_size}) {
    CAPTURE(input->width);
    const PatchifiedImage p = preprocess_image(*input, config_for("default"));
    CHECK(p.patch_dim == 1536);
    CHECK(p.resized_width == 320);
    CHECK(p.resized_height == 256);
    REQUIRE(p.pixel_values.size() == want.nbytes);
    double worst = 0;
    for (size_t i = 0; i < p.pixel_values.size(); ++i) {
      const double expected = (want.as<uint8_t>()[i] / 255.0 - 0.5) / 0.5;
      worst = std::max(worst, std::fabs(p.pixel_values[i] - expected));
    }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("smart_resize: rounding, bounds and the aspect-ratio limit") {
  // Already a multiple: unchanged.
  CHECK(smart_resize(256, 320, 32, 65536, 16777216).height == 256);
  CHECK(smart_resize(256, 320, 32, 65536, 16777216).width == 320);
  // 240 / 32 = 7.5 rounds half to even -> 8 (Python round), so 256.
  CHECK(smart_resize(240, 320, 32, 0, 16777216).height == 256);
  // 208 / 32 = 6.5 -> 6 (half to even, not up).
  CHECK(smart_resize(208, 320, 32, 0, 16777216).height == 192);
  // Tiny images are scaled up until min_pixels is reached.
  const ResizedSize tiny = smart_resize(1, 1, 32, 65536, 16777216);
  CHECK(tiny.height == 256);
  CHECK(tiny.width == 256);
  const ResizedSize small = smart_resize(10, 20, 32, 65536, 16777216);
  CHECK(small.height % 32 == 0);
  CHECK(small.width % 32 == 0);
  CHECK(small.height * small.width >= 65536);
  // Too big: scaled down to at most max_pixels, both sides multiples of the factor.
  const ResizedSize big = smart_resize(768, 1024, 32, 65536, 200704);
  CHECK(big.height * big.width <= 200704);
  CHECK(big.height == 384);
  CHECK(big.width == 512);
  // A very thin image keeps at least one factor on its short side.
  const ResizedSize thin = smart_resize(20, 3000, 32, 1024, 32 * 1024);
  CHECK(thin.height == 32);
  // Aspect ratio: exactly 200 is allowed, anything over is an error naming the size.
  CHECK_NOTHROW(smart_resize(10, 2000, 32, 65536, 16777216));
  CHECK_THROWS_WITH_AS(smart_resize(10, 2001, 32, 65536, 16777216),
                       doctest::Contains("2001x10: aspect ratio 200.1 is over the limit of 200"), Error);
  CHECK_THROWS_AS(smart_resize(5000, 20, 32, 65536, 16777216), Error);
  CHECK_THROWS_AS(smart_resize(0, 20, 32, 65536, 16777216), Error);
}

TEST_CASE("a decodable image wider than 200:1 is refused by the processor, naming its size") {
  const RgbImage img = decode_image_file(test::data_path("bad/too_wide.png"));  // 402x2
  CHECK_THROWS_WITH_AS(preprocess_image(img, PreprocessorConfig{}), doctest::Contains("402x2: aspect ratio 201.0"),
                       Error);
}

TEST_CASE("image_grid_for predicts the grid preprocess_image produces") {
  const PreprocessorConfig cfg = config_for("default");
  const ImageGrid g = image_grid_for(240, 320, cfg);
  CHECK(g.t == 1);
  CHECK(g.h == 16);
  CHECK(g.w == 20);
  CHECK(g.tokens(cfg.merge_size) == 80);
}

TEST_CASE("resize: same size is a copy, and a flat image stays flat") {
  RgbImage flat;
  flat.width = 37;
  flat.height = 23;
  flat.pixels.assign(37 * 23 * 3, 0);
  for (size_t i = 0; i < flat.pixels.size(); i += 3) {
    flat.pixels[i] = 200;
    flat.pixels[i + 1] = 17;
    flat.pixels[i + 2] = 255;
  }
  CHECK(resize_bicubic_antialias(flat, 37, 23).pixels == flat.pixels);
  for (auto [w, h] : {std::pair<int64_t, int64_t>{128, 96}, {5, 3}, {37, 64}, {1, 1}}) {
    const RgbImage out = resize_bicubic_antialias(flat, w, h);
    REQUIRE(out.pixels.size() == size_t(w * h * 3));
    bool all_same = true;
    for (size_t i = 0; i < out.pixels.size(); i += 3)
      all_same &= out.pixels[i] == 200 && out.pixels[i + 1] == 17 && out.pixels[i + 2] == 255;
    CHECK_MESSAGE(all_same, w, "x", h);
  }
}

TEST_CASE("patchify_u8 refuses sizes that are not whole merge windows") {
  RgbImage img;
  img.width = 48;
  img.height = 32;
  img.pixels.assign(48 * 32 * 3, 0);
  ImageGrid grid;
  CHECK_THROWS_AS(patchify_u8(img, PreprocessorConfig{}, &grid), Error);
}
