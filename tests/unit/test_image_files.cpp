// The decoder on the corpus in tests/data/bad (made by scripts/make_bad_images.py):
// broken files must fail with a one-line error naming the file, and the unusual
// but valid ones must decode to pixels derived here from how they were written.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/io/safetensors.h"
#include "test_support.h"

using namespace qvl;

namespace {

std::string bad(const std::string& name) { return test::data_path("bad/" + name); }

std::string decode_error(const std::string& path, const ImageLimits& limits = {}) {
  try {
    decode_image_file(path, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every pixel of `img` must equal expected(x, y).
void check_pixels(const RgbImage& img, int64_t width, int64_t height,
                  const std::function<std::array<int, 3>(int64_t, int64_t)>& expected) {
  REQUIRE(img.width == width);
  REQUIRE(img.height == height);
  REQUIRE(img.pixels.size() == size_t(width * height * 3));
  int wrong = 0;
  for (int64_t y = 0; y < height; ++y)
    for (int64_t x = 0; x < width; ++x) {
      const auto want = expected(x, y);
      const uint8_t* got = img.at(x, y);
      if (got[0] != want[0] || got[1] != want[1] || got[2] != want[2]) {
        if (++wrong <= 3)
          FAIL_CHECK("pixel (" << x << "," << y << ") is " << int(got[0]) << "," << int(got[1]) << ","
                               << int(got[2]) << " not " << want[0] << "," << want[1] << "," << want[2]);
      }
    }
  CHECK(wrong == 0);
}

std::array<int, 3> gray(int v) { return {v, v, v}; }

// The formulas scripts/make_bad_images.py wrote.
int rgb16_value(int64_t x, int64_t y, int c) { return int((x * 0x5432 + y * 0x2F01 + c * 0x1F3D + 0x0102) & 0xFFFF); }
std::array<int, 3> interlaced_rgb(int64_t x, int64_t y) {
  return {int((x * 25 + 3) & 0xFF), int((y * 31 + 7) & 0xFF), int((x * y * 5) & 0xFF)};
}

}  // namespace

TEST_CASE("broken files are refused with one line naming the file and the problem") {
  struct Case {
    const char* file;
    const char* says;
  };
  const Case cases[] = {
      {"empty.png", "file is empty (0 bytes)"},
      {"text.png", "not a PNG or JPEG image"},
      {"fake.jpg", "not a PNG or JPEG image"},
      {"huge_header.png", "image is 100000x100000 = 10000000000 pixels, over the limit of 50000000 pixels"},
      {"huge_header.jpg", "image is 65000x65000 = 4225000000 pixels, over the limit"},
      {"truncated.png", "corrupt or truncated PNG"},
      {"bad_crc.png", "CRC"},
      {"truncated.jpg", "truncated JPEG"},
      {"header_only.jpg", "JPEG"},
  };
  for (const Case& c : cases) {
    const std::string file = c.file;
    CAPTURE(file);
    const std::string message = decode_error(bad(c.file));
    CAPTURE(message);
    CHECK(message.find(c.says) != std::string::npos);
    CHECK(message.rfind(bad(c.file) + ": ", 0) == 0);  // starts with the path
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("size limits are enforced and configurable") {
  const std::string photo = test::data_path("images/photo.jpg");  // 320x240, 20005 bytes
  ImageLimits pixels;
  pixels.max_pixels = 320 * 240 - 1;
  CHECK(decode_error(photo, pixels).find("320x240 = 76800 pixels, over the limit of 76799") != std::string::npos);
  pixels.max_pixels = 320 * 240;
  CHECK(decode_image_file(photo, pixels).width == 320);

  ImageLimits bytes;
  bytes.max_file_bytes = 20004;
  CHECK(decode_error(photo, bytes).find("file is 20005 bytes, over the image file limit of 20004 bytes") !=
        std::string::npos);
  bytes.max_file_bytes = 20005;
  CHECK(decode_image_file(photo, bytes).height == 240);
}

TEST_CASE("missing files and folders are errors, not crashes") {
  CHECK(decode_error(bad("no_such_file.png")).find("cannot open image") != std::string::npos);
  CHECK(decode_error(test::data_path("bad")).find("not a regular file") != std::string::npos);
}

TEST_CASE("16-bit PNGs: gray clips at 255 like PIL's I;16, colour keeps the high byte") {
  const int gray16[8] = {0, 1, 255, 256, 300, 4096, 0xFF00, 0xFFFF};
  check_pixels(decode_image_file(bad("gray16.png")), 4, 2,
               [&](int64_t x, int64_t y) { return gray(std::min(gray16[y * 4 + x], 255)); });
  auto high_bytes = [](int64_t x, int64_t y) {
    return std::array<int, 3>{rgb16_value(x, y, 0) >> 8, rgb16_value(x, y, 1) >> 8, rgb16_value(x, y, 2) >> 8};
  };
  check_pixels(decode_image_file(bad("rgb16.png")), 3, 2, high_bytes);
  check_pixels(decode_image_file(bad("rgba16.png")), 3, 2, high_bytes);  // alpha dropped
  const int gray_alpha16[2] = {0xAB, 0x02};
  check_pixels(decode_image_file(bad("gray_alpha16.png")), 2, 1,
               [&](int64_t x, int64_t) { return gray(gray_alpha16[x]); });
}

TEST_CASE("gray+alpha, low bit depths and palettes") {
  const int gray_alpha[4] = {0, 77, 128, 255};
  check_pixels(decode_image_file(bad("gray_alpha.png")), 4, 1,
               [&](int64_t x, int64_t) { return gray(gray_alpha[x]); });
  const int bits1[10] = {1, 0, 1, 1, 0, 0, 0, 0, 0, 1};
  check_pixels(decode_image_file(bad("gray1.png")), 10, 1, [&](int64_t x, int64_t) { return gray(bits1[x] * 255); });
  check_pixels(decode_image_file(bad("gray2.png")), 4, 1, [](int64_t x, int64_t) { return gray(int(x) * 85); });

  const std::array<int, 3> palette[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
  const int indexes[2][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}};
  check_pixels(decode_image_file(bad("palette.png")), 4, 2,
               [&](int64_t x, int64_t y) { return palette[indexes[y][x]]; });
  const int packed[5] = {0, 1, 2, 3, 2};
  check_pixels(decode_image_file(bad("palette2.png")), 5, 1, [&](int64_t x, int64_t) { return palette[packed[x]]; });
}

TEST_CASE("interlaced PNG is de-interlaced") {
  check_pixels(decode_image_file(bad("interlaced.png")), 9, 7, interlaced_rgb);
}

TEST_CASE("progressive JPEG: a lossless progressive copy of photo.jpg decodes to the reference bytes") {
  SafetensorsFile expected(test::data_path("decoded_images.safetensors"));
  const TensorView& want = expected.get("decoded.photo.jpg");
  const RgbImage got = decode_image_file(bad("progressive.jpg"));
  REQUIRE(got.pixels.size() == want.nbytes);
  CHECK(std::equal(got.pixels.begin(), got.pixels.end(), want.as<uint8_t>()));
}

TEST_CASE("CMYK JPEG: Adobe-inverted samples, converted with PIL's formula") {
  // Quadrants were stored as inverted CMYK (255,0,0,255), (0,255,0,255), (0,0,255,255), (255,255,255,128):
  // no cyan ink + full magenta and yellow = red, and so on; the last is 50% black ink only.
  const std::array<int, 3> quadrant[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {128, 128, 128}};
  const RgbImage img = decode_image_file(bad("cmyk.jpg"));
  REQUIRE(img.width == 16);
  REQUIRE(img.height == 16);
  for (int64_t y = 0; y < 16; ++y)
    for (int64_t x = 0; x < 16; ++x) {
      const auto want = quadrant[(y / 8) * 2 + x / 8];
      for (int c = 0; c < 3; ++c) CHECK_MESSAGE(std::abs(img.at(x, y)[c] - want[c]) <= 3, x, ",", y, " c", c);
    }
}

TEST_CASE("EXIF and XMP orientation turn the picture upright, as exif_transpose does") {
  const RgbImage upright = decode_image_file(bad("upright.jpg"));  // 24x16, no metadata
  REQUIRE(upright.width == 24);
  REQUIRE(upright.height == 16);
  const int64_t w = upright.width, h = upright.height;
  auto pixel_of = [&](int64_t x, int64_t y) {
    const uint8_t* p = upright.at(x, y);
    return std::array<int, 3>{p[0], p[1], p[2]};
  };
  // 6: the camera was turned right; showing it upright turns it clockwise: the
  // stored bottom-left corner becomes the top-left.
  check_pixels(decode_image_file(bad("exif6.jpg")), h, w, [&](int64_t x, int64_t y) { return pixel_of(y, h - 1 - x); });
  // 3 (big-endian EXIF): upside down.
  check_pixels(decode_image_file(bad("exif3.jpg")), w, h,
               [&](int64_t x, int64_t y) { return pixel_of(w - 1 - x, h - 1 - y); });
  // 8 from XMP only: counter-clockwise, stored top-right becomes top-left.
  check_pixels(decode_image_file(bad("xmp8.jpg")), h, w, [&](int64_t x, int64_t y) { return pixel_of(w - 1 - y, x); });
  // PNG eXIf chunk (after IDAT), orientation 6, over a 3x2 image.
  check_pixels(decode_image_file(bad("exif6.png")), 2, 3,
               [](int64_t x, int64_t y) { return interlaced_rgb(y, 1 - x); });
}

TEST_CASE("animated PNG: the default image, which PIL opens as frame 0") {
  // The 5x3 IDAT image make_bad_images.py wrote; the later 3x2 magenta frame must not show.
  check_pixels(decode_image_file(bad("animated.png")), 5, 3, [](int64_t x, int64_t y) {
    return std::array<int, 3>{int((x * 40 + 10) & 0xFF), int((y * 70 + 20) & 0xFF), int((x * y * 13 + 5) & 0xFF)};
  });
}
