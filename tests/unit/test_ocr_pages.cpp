// qvl ocr's reader side (qvl/batch/ocr_pages.h) on the fixture images: pages
// of multi-page files, pages already written (--resume), identical content
// decoded once, unreadable files, and the prefetch thread's order.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qvl/batch/ocr_pages.h"
#include "qvl/io/sha256.h"
#include "test_support.h"

using namespace qvl;
using qvl::test::data_path;

namespace {

OcrPreparer small_preparer() {
  OcrPreparer p;
  p.preprocessor.max_pixels = 200704;
  p.request.pdf_dpi = 36;
  return p;
}

std::vector<OcrPage> pages_of(OcrPreparer& preparer, const std::string& path) {
  std::vector<OcrPage> pages;
  preparer.prepare({path, "", path}, [&](OcrPage p) {
    pages.push_back(std::move(p));
    return true;
  });
  return pages;
}

std::string copy_of(const std::string& from, const std::string& name) {
  const std::string to = std::string("/tmp/qvl_ocr_pages_") + std::to_string(::getpid()) + "_" + name;
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  return to;
}

}  // namespace

TEST_CASE("ocr pages: a PDF gives one page per page, each decoded") {
  const std::string pdf = data_path("images/formats/pages3.pdf");
  OcrPreparer preparer = small_preparer();
  const std::vector<OcrPage> pages = pages_of(preparer, pdf);
  REQUIRE(pages.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(pages[i].page == i + 1);
    CHECK(pages[i].pages == 3);
    CHECK(pages[i].sha256 == sha256_file_hex(pdf));
    CHECK(pages[i].error == "");
    CHECK_FALSE(pages[i].already_done);
    CHECK(pages[i].width > 0);
    CHECK_FALSE(pages[i].image.pixel_values.empty());
  }
}

TEST_CASE("ocr pages: pages an earlier run wrote are marked done and not decoded") {
  const std::string tif = data_path("images/formats/pages2.tif");
  const std::string png = data_path("images/small.png");
  const std::set<OcrRecordKey> done = {{tif, sha256_file_hex(tif), 2}, {png, sha256_file_hex(png), 0},
                                       {"/nonexistent/gone.png", "", 0}};
  OcrPreparer preparer = small_preparer();
  preparer.done = &done;
  const std::vector<OcrPage> tif_pages = pages_of(preparer, tif);
  REQUIRE(tif_pages.size() == 2);
  CHECK_FALSE(tif_pages[0].already_done);
  CHECK_FALSE(tif_pages[0].image.pixel_values.empty());
  CHECK(tif_pages[1].already_done);
  CHECK(tif_pages[1].image.pixel_values.empty());

  const std::vector<OcrPage> png_pages = pages_of(preparer, png);
  REQUIRE(png_pages.size() == 1);
  CHECK(png_pages[0].already_done);
  CHECK(png_pages[0].page == 0);
  CHECK(png_pages[0].image.pixel_values.empty());

  // Unreadable then and now: done; the same file with other bytes is not.
  const std::vector<OcrPage> gone = pages_of(preparer, "/nonexistent/gone.png");
  REQUIRE(gone.size() == 1);
  CHECK(gone[0].already_done);
  const std::set<OcrRecordKey> other_bytes = {{png, "0000", 0}};
  preparer.done = &other_bytes;
  CHECK_FALSE(pages_of(preparer, png)[0].already_done);
}

TEST_CASE("ocr pages: identical content is decoded once, and again on request") {
  const std::string png = data_path("images/small.png");
  const std::string copy = copy_of(png, "copy.png");
  OcrPreparer preparer = small_preparer();
  const OcrPage first = pages_of(preparer, png).at(0);
  const OcrPage second = pages_of(preparer, copy).at(0);
  CHECK_FALSE(first.same_as_earlier);
  CHECK_FALSE(first.image.pixel_values.empty());
  CHECK(second.same_as_earlier);
  CHECK(second.sha256 == first.sha256);
  CHECK(second.image.pixel_values.empty());
  const OcrPage again = preparer.prepare_page(copy, 0);
  CHECK_FALSE(again.same_as_earlier);
  CHECK(again.image.pixel_values == first.image.pixel_values);
  std::remove(copy.c_str());
}

TEST_CASE("ocr pages: an unreadable file is one page with an error that names it") {
  OcrPreparer preparer = small_preparer();
  const std::vector<OcrPage> missing = pages_of(preparer, "/nonexistent/gone.png");
  REQUIRE(missing.size() == 1);
  CHECK(missing[0].sha256 == "");
  CHECK(missing[0].error.find("/nonexistent/gone.png") != std::string::npos);
  const std::string fake = data_path("bad/fake.jpg");
  const std::vector<OcrPage> bad = pages_of(preparer, fake);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].sha256 == sha256_file_hex(fake));  // read, so hashed
  CHECK(bad[0].error.rfind(fake, 0) == 0);
  CHECK_FALSE(bad[0].already_done);
}

TEST_CASE("ocr pages: a TIFF whose directories loop gives its readable pages, then the loop as an error") {
  const std::string path = std::string("/tmp/qvl_ocr_pages_") + std::to_string(::getpid()) + "_loop.tif";
  const std::vector<uint8_t> looped = test::many_page_tiff(3, true);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(looped.data()), std::streamsize(looped.size()));
  OcrPreparer preparer = small_preparer();
  const std::vector<OcrPage> pages = pages_of(preparer, path);
  std::remove(path.c_str());
  REQUIRE(pages.size() == 4);
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(pages[i].page == i + 1);
    CHECK(pages[i].pages == 4);
    CHECK(pages[i].sha256 == sha256_hex(std::string(looped.begin(), looped.end())));
  }
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(pages[i].error == "");
    CHECK(pages[i].width == 2);
    CHECK_FALSE(pages[i].image.pixel_values.empty());
  }
  CHECK(pages[3].error.find(path + ": damaged TIFF: its directory chain loops") == 0);
  CHECK(pages[3].image.pixel_values.empty());
}

TEST_CASE("ocr pages: the prefetch thread gives the pages in input order") {
  const std::vector<ScannedFile> files = {{data_path("images/small.png"), "", "a"},
                                          {data_path("images/formats/pages3.pdf"), "", "b"},
                                          {"/nonexistent/gone.png", "", "c"},
                                          {data_path("images/gray.jpg"), "", "d"}};
  std::vector<std::string> got;
  {
    OcrPrefetcher prefetch(files, small_preparer(), 1, nullptr);
    while (std::optional<OcrPage> p = prefetch.next()) got.push_back(p->path + "#" + std::to_string(p->page));
  }
  CHECK(got == std::vector<std::string>{files[0].path + "#0", files[1].path + "#1", files[1].path + "#2",
                                        files[1].path + "#3", "/nonexistent/gone.png#0", files[3].path + "#0"});
}
