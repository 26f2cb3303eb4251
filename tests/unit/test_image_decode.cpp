// Decoding the fixture images must give exactly the pixels PIL gave the reference.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "qvl/image/decode.h"
#include "qvl/image/orientation.h"
#include "qvl/io/safetensors.h"
#include "test_support.h"

using namespace qvl;

namespace {
const std::vector<std::string> kFixtureImages = {"small.png", "photo.jpg", "gray.jpg", "wide_rgba.png", "big.jpg"};

// How many bytes differ; the fixtures demand zero.
size_t count_differences(const RgbImage& got, const TensorView& want) {
  size_t differ = 0;
  const uint8_t* w = want.as<uint8_t>();
  for (size_t i = 0; i < got.pixels.size(); ++i) differ += got.pixels[i] != w[i];
  return differ;
}
}  // namespace

TEST_CASE("fixture images decode to exactly the reference's RGB bytes") {
  SafetensorsFile expected(test::data_path("decoded_images.safetensors"));
  for (const std::string& name : kFixtureImages) {
    CAPTURE(name);
    const TensorView& want = expected.get("decoded." + name);
    REQUIRE(want.dtype == DType::U8);
    REQUIRE(want.shape.size() == 3);
    const RgbImage got = decode_image_file(test::data_path("images/" + name));
    CHECK(got.height == want.shape[0]);
    CHECK(got.width == want.shape[1]);
    CHECK(want.shape[2] == 3);
    REQUIRE(got.pixels.size() == want.nbytes);
    CHECK(count_differences(got, want) == 0);
  }
}

TEST_CASE("format is detected from the magic bytes") {
  const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const uint8_t jpeg[] = {0xFF, 0xD8, 0xFF, 0xE0};
  const uint8_t text[] = {'h', 'e', 'l', 'l', 'o'};
  CHECK(detect_image_format(png, sizeof png) == ImageFormat::Png);
  CHECK(detect_image_format(jpeg, sizeof jpeg) == ImageFormat::Jpeg);
  CHECK(detect_image_format(text, sizeof text) == ImageFormat::Unknown);
  CHECK(detect_image_format(png, 4) == ImageFormat::Unknown);
}

TEST_CASE("apply_orientation: all eight EXIF orientations, as PIL's exif_transpose lays them out") {
  // 3x2 picture whose red channel numbers the pixels:  0 1 2 / 3 4 5
  RgbImage in;
  in.width = 3;
  in.height = 2;
  for (int v = 0; v < 6; ++v) in.pixels.insert(in.pixels.end(), {uint8_t(v), 9, 9});
  struct Expected {
    int orientation;
    int64_t width, height;
    std::vector<int> red;  // rows top to bottom
  };
  const Expected cases[] = {
      {1, 3, 2, {0, 1, 2, 3, 4, 5}},  // as stored
      {2, 3, 2, {2, 1, 0, 5, 4, 3}},  // FLIP_LEFT_RIGHT
      {3, 3, 2, {5, 4, 3, 2, 1, 0}},  // ROTATE_180
      {4, 3, 2, {3, 4, 5, 0, 1, 2}},  // FLIP_TOP_BOTTOM
      {5, 2, 3, {0, 3, 1, 4, 2, 5}},  // TRANSPOSE
      {6, 2, 3, {3, 0, 4, 1, 5, 2}},  // ROTATE_270 (a quarter turn clockwise)
      {7, 2, 3, {5, 2, 4, 1, 3, 0}},  // TRANSVERSE
      {8, 2, 3, {2, 5, 1, 4, 0, 3}},  // ROTATE_90 (a quarter turn counter-clockwise)
      {9, 3, 2, {0, 1, 2, 3, 4, 5}},  // invalid: ignored, like PIL
  };
  for (const Expected& e : cases) {
    CAPTURE(e.orientation);
    const RgbImage out = apply_orientation(in, e.orientation);
    CHECK(out.width == e.width);
    CHECK(out.height == e.height);
    std::vector<int> red;
    for (size_t i = 0; i < out.pixels.size(); i += 3) red.push_back(out.pixels[i]);
    CHECK(red == e.red);
  }
}

TEST_CASE("exif_orientation reads both byte orders and shrugs off malformed blocks") {
  const uint8_t little[] = {'E', 'x', 'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0,
                            0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0};
  const uint8_t big[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0};
  CHECK(exif_orientation(little, sizeof little) == 6);
  CHECK(exif_orientation(big, sizeof big) == 8);
  CHECK(exif_orientation(little, 20) == 1);  // entry cut off
  const uint8_t garbage[] = {'I', 'I', 42, 0, 0xFF, 0xFF, 0xFF, 0x7F};  // IFD offset far past the end
  CHECK(exif_orientation(garbage, sizeof garbage) == 1);
  CHECK(exif_orientation(nullptr, 0) == 1);
}
