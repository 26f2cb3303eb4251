// WebP, TIFF, BMP, GIF and PDF (and more PNG/JPEG colour layouts) against the
// reference: tests/data/images/formats/decoded.safetensors holds PIL 9.4's
// Image.open -> exif_transpose -> convert("RGB") bytes for each sample, and
// pdftoppm's rendering for the PDF pages (scripts/make_format_samples.py).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <cstdio>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include <webp/decode.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/io/safetensors.h"
#include "test_support.h"

using namespace qvl;

namespace {

std::string sample(const std::string& name) { return test::data_path("images/formats/" + name); }

const SafetensorsFile& golden() {
  static const SafetensorsFile file(sample("decoded.safetensors"));
  return file;
}

struct Difference {
  size_t bytes_differ = 0;
  int max_abs = 0;
};

Difference compare(const RgbImage& got, const TensorView& want) {
  Difference d;
  const uint8_t* w = want.as<uint8_t>();
  for (size_t i = 0; i < got.pixels.size(); ++i) {
    const int diff = std::abs(int(got.pixels[i]) - int(w[i]));
    d.bytes_differ += diff != 0;
    d.max_abs = std::max(d.max_abs, diff);
  }
  return d;
}

void check_against_golden(const RgbImage& got, const std::string& key, int tolerance) {
  CAPTURE(key);
  const TensorView& want = golden().get(key);
  REQUIRE(want.shape.size() == 3);
  CHECK(got.height == want.shape[0]);
  CHECK(got.width == want.shape[1]);
  REQUIRE(got.pixels.size() == want.nbytes);
  const Difference d = compare(got, want);
  CAPTURE(d.bytes_differ);
  CHECK(d.max_abs <= tolerance);
}

std::string decode_error(const std::string& path, const DecodeRequest& request = {}) {
  try {
    decode_image_file(path, {}, request);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("every sample decodes to the reference's bytes") {
  // Exact unless listed here, with the reason.
  const std::map<std::string, int> tolerance = {};
  int compared = 0;
  for (const auto& [key, view] : golden().tensors()) {
    if (key.find('#') != std::string::npos) continue;  // pages: below
    const int allowed = tolerance.count(key) ? tolerance.at(key) : 0;
    check_against_golden(decode_image_file(sample(key)), key, allowed);
    ++compared;
  }
  CHECK(compared >= 30);
}

TEST_CASE("formats are detected from the content, not the name") {
  const std::vector<std::pair<std::string, ImageFormat>> files = {
      {"lossy.webp", ImageFormat::Webp},  {"rgb8.tif", ImageFormat::Tiff},    {"rgb24.bmp", ImageFormat::Bmp},
      {"palette.gif", ImageFormat::Gif},  {"pages3.pdf", ImageFormat::Pdf},   {"cmyk.jpg", ImageFormat::Jpeg},
      {"gray_alpha.png", ImageFormat::Png},
  };
  for (const auto& [name, format] : files) {
    CAPTURE(name);
    const std::vector<uint8_t> bytes = read_image_bytes(sample(name));
    CHECK(detect_image_format(bytes.data(), bytes.size()) == format);
    // Same bytes under a misleading name decode the same.
    const RgbImage a = decode_image(bytes.data(), bytes.size(), "picture.png");
    CHECK(a.width > 0);
  }
}

TEST_CASE("TIFF pages are directories") {
  const std::vector<uint8_t> bytes = read_image_bytes(sample("pages2.tif"));
  CHECK(image_page_count(bytes.data(), bytes.size(), "pages2.tif") == 2);
  DecodeRequest second;
  second.page = 2;
  check_against_golden(decode_image(bytes.data(), bytes.size(), "pages2.tif", {}, second), "pages2.tif#2", 0);
  DecodeRequest third;
  third.page = 3;
  CHECK(decode_error(sample("pages2.tif"), third).find("page 3 requested, but the file has 2 pages") !=
        std::string::npos);
  const std::vector<uint8_t> single = read_image_bytes(sample("rgb8.tif"));
  CHECK(image_page_count(single.data(), single.size(), "rgb8.tif") == 1);
}

TEST_CASE("PDF pages render at the requested dpi like pdftoppm") {
  const std::vector<uint8_t> bytes = read_image_bytes(sample("pages3.pdf"));
  CHECK(image_page_count(bytes.data(), bytes.size(), "pages3.pdf") == 3);
  for (int page = 1; page <= 3; ++page) {
    DecodeRequest request;
    request.page = page;
    request.pdf_dpi = 72;
    check_against_golden(decode_image(bytes.data(), bytes.size(), "pages3.pdf", {}, request),
                         "pages3.pdf#" + std::to_string(page) + "@72", 0);
  }
  // The default is 150 dpi: the 144x108 pt page becomes 300x225 pixels.
  const RgbImage page1 = decode_image(bytes.data(), bytes.size(), "pages3.pdf");
  CHECK(page1.width == 300);
  CHECK(page1.height == 225);
  // Independently of poppler's tools: page 1's box (10,10)-(70,50) pt in 0.9 0.1 0.1 red, on white paper.
  const uint8_t* inside = page1.at(60 * 150 / 72, 225 - 15 * 150 / 72);
  CHECK(std::abs(inside[0] - 230) <= 1);
  CHECK(std::abs(inside[1] - 26) <= 1);
  CHECK(std::abs(inside[2] - 26) <= 1);
  const uint8_t* paper = page1.at(150, 10);
  CHECK((paper[0] == 255 && paper[1] == 255 && paper[2] == 255));

  DecodeRequest fourth;
  fourth.page = 4;
  CHECK(decode_error(sample("pages3.pdf"), fourth).find("page 4 requested, but the file has 3 pages") !=
        std::string::npos);
  ImageLimits small;
  small.max_pixels = 300 * 225 - 1;
  try {
    decode_image(bytes.data(), bytes.size(), "pages3.pdf", small);
    FAIL("a page over the pixel limit was rendered");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("over the limit of 67499 pixels") != std::string::npos);
  }
}

TEST_CASE("PDF pages with /Rotate come out turned, sized before rendering") {
  const std::vector<uint8_t> bytes = read_image_bytes(sample("rotated.pdf"));
  for (int page = 1; page <= 2; ++page) {
    DecodeRequest request;
    request.page = page;
    request.pdf_dpi = 72;
    const RgbImage image = decode_image(bytes.data(), bytes.size(), "rotated.pdf", {}, request);
    CHECK(image.width == 108);  // a 144x108 pt page turned a quarter
    CHECK(image.height == 144);
    check_against_golden(image, "rotated.pdf#" + std::to_string(page) + "@72", 0);
    // The limit is checked on the turned size, exactly.
    ImageLimits exact;
    exact.max_pixels = 108 * 144;
    CHECK(decode_image(bytes.data(), bytes.size(), "rotated.pdf", exact, request).width == 108);
  }
}

TEST_CASE("single-image formats have one page") {
  for (const char* name : {"sample.webp", "sample.bmp", "sample.gif"}) {
    CAPTURE(name);
    const std::vector<uint8_t> bytes = read_image_bytes(sample(name));
    CHECK(image_page_count(bytes.data(), bytes.size(), name) == 1);
    DecodeRequest second;
    second.page = 2;
    CHECK(decode_error(sample(name), second).find("page 2 requested, but the file has 1 page") != std::string::npos);
  }
}

namespace {
// A lossless animated WebP of the given RGB frames (width x height each), 100 ms apiece.
std::vector<uint8_t> animated_webp(int width, int height, const std::vector<std::vector<uint8_t>>& frames) {
  WebPAnimEncoderOptions options;
  REQUIRE(WebPAnimEncoderOptionsInit(&options));
  WebPAnimEncoder* encoder = WebPAnimEncoderNew(width, height, &options);
  REQUIRE(encoder);
  WebPConfig config;
  REQUIRE(WebPConfigInit(&config));
  config.lossless = 1;
  int timestamp_ms = 0;
  for (const std::vector<uint8_t>& rgb : frames) {
    WebPPicture picture;
    REQUIRE(WebPPictureInit(&picture));
    picture.width = width;
    picture.height = height;
    picture.use_argb = 1;
    REQUIRE(WebPPictureImportRGB(&picture, rgb.data(), width * 3));
    CHECK(WebPAnimEncoderAdd(encoder, &picture, timestamp_ms, &config));
    WebPPictureFree(&picture);
    timestamp_ms += 100;
  }
  CHECK(WebPAnimEncoderAdd(encoder, nullptr, timestamp_ms, nullptr));
  WebPData assembled;
  WebPDataInit(&assembled);
  CHECK(WebPAnimEncoderAssemble(encoder, &assembled));
  std::vector<uint8_t> bytes(assembled.bytes, assembled.bytes + assembled.size);
  WebPDataClear(&assembled);
  WebPAnimEncoderDelete(encoder);
  return bytes;
}
}  // namespace

TEST_CASE("an animated WebP is read as its first frame") {
  const int width = 5, height = 3;
  std::vector<uint8_t> first(width * height * 3), second(first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    first[i] = uint8_t(i * 17);
    second[i] = uint8_t(255 - i * 5);
  }
  const std::vector<uint8_t> bytes = animated_webp(width, height, {first, second});
  WebPBitstreamFeatures features;
  REQUIRE(WebPGetFeatures(bytes.data(), bytes.size(), &features) == VP8_STATUS_OK);
  REQUIRE(features.has_animation);
  const RgbImage image = decode_image(bytes.data(), bytes.size(), "two_frames.webp");
  CHECK(image.width == width);
  CHECK(image.height == height);
  CHECK(image.pixels == first);
  // Its canvas is held to the pixel limit like a still image.
  ImageLimits small;
  small.max_pixels = width * height - 1;
  try {
    decode_image(bytes.data(), bytes.size(), "two_frames.webp", small);
    FAIL("the limit was not applied");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("image is 5x3") != std::string::npos);
  }
  // PIL's two-frame sample: its canvas, as large as the still samples.
  const RgbImage sample_frame = decode_image_file(sample("animated.webp"));
  const RgbImage still = decode_image_file(sample("lossy.webp"));
  CHECK(sample_frame.width == still.width);
  CHECK(sample_frame.height == still.height);
}

TEST_CASE("refused layouts say what they are") {
  CHECK(decode_error(sample("rle8.bmp")).find("RLE-compressed BMP is not supported") != std::string::npos);
}

TEST_CASE("a GIF named .png is read as the GIF it is") {
  // tests/data/bad/gif_named.png: a 1x1 GIF; PIL 9.4 gives one black pixel.
  const RgbImage image = decode_image_file(test::data_path("bad/gif_named.png"));
  CHECK(image.width == 1);
  CHECK(image.height == 1);
  CHECK(image.pixels == std::vector<uint8_t>{0, 0, 0});
}


TEST_CASE("hostile page counts: bounded, quick, and no allocation per page") {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<uint8_t> many = test::many_page_tiff(100000, false);
  try {
    image_page_count(many.data(), many.size(), "many.tif");
    FAIL("100000 directories were counted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("TIFF has more than 10000 pages") != std::string::npos);
  }
  ImageLimits few;
  few.max_pages = 100000;
  CHECK(image_page_count(many.data(), many.size(), "many.tif", few) == 100000);
  DecodeRequest last;
  last.page = 100000;
  const RgbImage image = decode_image(many.data(), many.size(), "many.tif", few, last);
  CHECK(image.pixels == std::vector<uint8_t>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4});
  const std::vector<uint8_t> looped = test::many_page_tiff(3, true);
  try {
    image_page_count(looped.data(), looped.size(), "loop.tif");
    FAIL("a directory loop was counted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("loop.tif: damaged TIFF: its directory chain loops") == 0);
  }
  CHECK(decode_image(looped.data(), looped.size(), "loop.tif").width == 2);  // page 1 is still there
  // A reader that goes on past damage gets the pages before the loop, and the loop as an error.
  const ReadablePages readable = image_readable_pages(looped.data(), looped.size(), "loop.tif");
  CHECK(readable.count == 3);
  CHECK(readable.damage.find("loop.tif: damaged TIFF: its directory chain loops") == 0);
  DecodeRequest third, fourth;
  third.page = 3;
  fourth.page = 4;
  CHECK(decode_image(looped.data(), looped.size(), "loop.tif", {}, third).width == 2);
  try {
    decode_image(looped.data(), looped.size(), "loop.tif", {}, fourth);
    FAIL("a page after the loop was read");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == readable.damage);
  }
  CHECK(image_readable_pages(many.data(), many.size(), "many.tif", few).damage.empty());
  // A PDF whose page tree claims 100000 pages it does not have.
  const std::vector<uint8_t> pdf = read_image_bytes(test::data_path("bad/pdf_100000_pages.pdf"));
  try {
    image_page_count(pdf.data(), pdf.size(), "lying.pdf");
    FAIL("a lying page count was believed");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("PDF has no readable pages") != std::string::npos);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(seconds < 20 * test::time_scale());  // a few seconds on a busy 2-core machine; a hang would be minutes
}

namespace {
// A one-page PDF (an empty page) whose page object has these entries besides its type and parent.
std::vector<uint8_t> one_page_pdf(const std::string& page_entries) {
  const std::string objects[] = {
      "<< /Type /Catalog /Pages 2 0 R >>",
      "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
      "<< /Type /Page /Parent 2 0 R " + page_entries + " >>",
  };
  std::string out = "%PDF-1.4\n";
  std::vector<size_t> offsets;
  for (size_t i = 0; i < std::size(objects); ++i) {
    offsets.push_back(out.size());
    out += std::to_string(i + 1) + " 0 obj\n" + objects[i] + "\nendobj\n";
  }
  const size_t xref = out.size();
  out += "xref\n0 4\n0000000000 65535 f \n";
  for (size_t offset : offsets) {
    char entry[32];
    std::snprintf(entry, sizeof entry, "%010zu 00000 n \n", offset);
    out += entry;
  }
  out += "trailer\n<< /Size 4 /Root 1 0 R >>\nstartxref\n" + std::to_string(xref) + "\n%%EOF\n";
  return std::vector<uint8_t>(out.begin(), out.end());
}

std::string pdf_error(const std::string& page_entries) {
  const std::vector<uint8_t> pdf = one_page_pdf(page_entries);
  DecodeRequest request;
  request.pdf_dpi = 72;
  try {
    decode_image(pdf.data(), pdf.size(), "box.pdf", {}, request);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("a PDF page whose MediaBox poppler cannot use is an error, not a US Letter page") {
  // poppler reads each of these as 612 x 792 points without a word.
  for (const char* box : {"[0 0 0 0]", "[0 0 1e30 1e30]", "[0 0 a b]", "[0 0 612]"}) {
    CAPTURE(box);
    CHECK(pdf_error(std::string("/MediaBox ") + box) ==
          std::string("box.pdf: PDF page 1 has no usable MediaBox (") + box + "); qvl will not guess its size");
  }
  CHECK(pdf_error("") == "box.pdf: PDF page 1 has no usable MediaBox (the file has none); qvl will not guess its size");
  // A page that is Letter, or any other readable size, renders at that size.
  DecodeRequest request;
  request.pdf_dpi = 72;
  for (const auto& [box, width, height] :
       {std::tuple<const char*, int, int>{"[0 0 612 792]", 612, 792}, {"[ 0 0 612.0 792 ]", 612, 792},
        {"[-5 10 195 110]", 200, 100}}) {
    CAPTURE(box);
    const std::vector<uint8_t> pdf = one_page_pdf(std::string("/MediaBox ") + box);
    const RgbImage image = decode_image(pdf.data(), pdf.size(), "box.pdf", {}, request);
    CHECK(image.width == width);
    CHECK(image.height == height);
  }
  // Where the boxes may be out of sight (compressed in object streams), poppler's size is believed.
  const std::vector<uint8_t> hidden = one_page_pdf("/MediaBox [0 0 0 0] /PieceInfo /ObjStm");
  CHECK(decode_image(hidden.data(), hidden.size(), "box.pdf", {}, request).width == 612);
}

TEST_CASE("a TIFF whose strip is cut short says so plainly") {
  // One 2x2 page whose 4 bytes of pixels would start 2 bytes before the end of the file.
  std::vector<uint8_t> tiff = test::many_page_tiff(1, false);
  const size_t strip_offset_at = 12 + 2 + 5 * 12 + 8;  // the value of the 6th entry (StripOffsets)
  const uint32_t cut = uint32_t(tiff.size() - 2);
  for (int k = 0; k < 4; ++k) tiff[strip_offset_at + k] = uint8_t(cut >> (8 * k));
  try {
    decode_image(tiff.data(), tiff.size(), "cut.tif");
    FAIL("a cut strip was decoded");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "cut.tif: damaged TIFF: its image data ends early (2 of 4 bytes)");
  }
}

TEST_CASE("hostile files in tests/data/bad are refused in one line naming the file") {
  const std::pair<const char*, const char*> cases[] = {
      {"pdf_encrypted.pdf", "PDF is encrypted with a password"},
      {"pdf_huge_page.pdf", "would be 30000x30000 = 900000000 pixels, over the limit"},
      {"pdf_truncated.pdf", "invalid or damaged PDF"},
      {"pdf_100000_pages.pdf", "PDF has no readable pages"},
      {"tiff_huge.tif", "image is 100000x100000"},
      {"tiff_truncated.tif", "invalid TIFF"},
      {"bmp_absurd_offset.bmp", "pixel data offset 4294967280 is outside the file"},
      {"bmp_huge.bmp", "image is 2147483647x2147483647"},
      {"bmp_truncated.bmp", "truncated BMP"},
      {"bmp_rle8.bmp", "RLE-compressed BMP is not supported"},
      {"gif_truncated.gif", "corrupt or truncated GIF"},
      {"gif_huge.gif", "image is 65535x65535"},
      {"webp_huge.webp", "image is 16384x16384"},
      {"webp_truncated.webp", "invalid WebP"},
  };
  for (const auto& [file, says] : cases) {
    const std::string path = test::data_path(std::string("bad/") + file);
    CAPTURE(path);
    const std::string message = decode_error(path);
    CAPTURE(message);
    CHECK(message.find(says) != std::string::npos);
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("JPEG DCT scaling: the smallest 1/2, 1/4, 1/8 scale that keeps at least the target's pixels") {
  const std::string big = test::data_path("images/big.jpg");  // 1024x768
  const RgbImage full = decode_image_file(big);
  struct Case {
    int64_t target, width, height;
  };
  const Case cases[] = {
      {0, 1024, 768},              // no target: full size, the reference's bytes
      {1024 * 768, 1024, 768},     // the target is the whole image: 1/2 would be too small
      {512 * 384, 512, 384},       // exactly 1/2
      {512 * 384 + 1, 1024, 768},  // one pixel more than 1/2 has
      {200 * 150, 256, 192},       // 1/4 (1/8 = 128x96 would be below the target)
      {1, 128, 96},                // 1/8 at most
  };
  for (const Case& c : cases) {
    CAPTURE(c.target);
    DecodeRequest request;
    request.target_max_pixels = c.target;
    const RgbImage scaled = decode_image_file(big, {}, request);
    CHECK(scaled.width == c.width);
    CHECK(scaled.height == c.height);
    // The scaled decode is close to the full decode averaged over f x f blocks.
    const int64_t f = full.width / scaled.width;
    double total = 0;
    for (int64_t y = 0; y < scaled.height; ++y)
      for (int64_t x = 0; x < scaled.width; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          double mean = 0;
          for (int64_t dy = 0; dy < f; ++dy)
            for (int64_t dx = 0; dx < f; ++dx) mean += full.at(x * f + dx, y * f + dy)[ch];
          mean /= double(f * f);
          total += std::abs(mean - scaled.at(x, y)[ch]);
        }
    const double mean_abs = total / double(scaled.pixels.size());
    CAPTURE(mean_abs);
    // Measured: 2.2 at 1/2, 1.2 at 1/4, 0.7 at 1/8 (libjpeg's reduced IDCTs are not box filters);
    // a shifted, transposed or wrongly scaled picture is far off (tens).
    CHECK(mean_abs < 3.0);
  }
  // max_pixels limits the decoded pixels: refused at full size, accepted when it will be scaled.
  ImageLimits limits;
  limits.max_pixels = 300 * 300;
  CHECK(decode_error(big).find("(no error)") != std::string::npos);
  try {
    decode_image_file(big, limits);
    FAIL("a 1024x768 JPEG passed a 90000-pixel limit");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("1024x768 = 786432 pixels, over the limit of 90000") != std::string::npos);
  }
  DecodeRequest small;
  small.target_max_pixels = 200 * 150;
  CHECK(decode_image_file(big, limits, small).width == 256);
  // The sanity bound on declared sizes still holds when scaling would shrink it.
  limits.max_declared_pixels = 1024 * 768 - 1;
  CHECK_THROWS_AS(decode_image_file(big, limits, small), Error);
}
