// Expanding command-line inputs into files: order, filters, recursion, links.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "qvl/io/file_scan.h"

using namespace qvl;

namespace {

// A throw-away folder tree under /tmp, removed at the end of the test.
struct TempTree {
  std::string root;
  TempTree() {
    char tmpl[] = "/tmp/qvl-scan-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
  }
  ~TempTree() { std::system(("rm -rf '" + root + "'").c_str()); }
  void file(const std::string& rel) {
    std::FILE* f = std::fopen((root + "/" + rel).c_str(), "wb");
    REQUIRE(f != nullptr);
    std::fclose(f);
  }
  void dir(const std::string& rel) { REQUIRE(::mkdir((root + "/" + rel).c_str(), 0755) == 0); }
};

std::vector<std::string> paths_of(const std::vector<ScannedFile>& files) {
  std::vector<std::string> paths;
  for (const auto& f : files) {
    CHECK(f.error.empty());
    paths.push_back(f.path);
  }
  return paths;
}

}  // namespace

TEST_CASE("file_scan: image extensions in any case") {
  CHECK(has_image_extension("a.png"));
  CHECK(has_image_extension("a.PNG"));
  CHECK(has_image_extension("scan.Jpeg"));
  CHECK(has_image_extension("x.tar.jpg"));
  CHECK_FALSE(has_image_extension("png"));
  for (const char* name : {"a.gif", "scan.TIF", "b.tiff", "c.webp", "d.bmp", "e.Pdf"}) CHECK(has_image_extension(name));
  CHECK_FALSE(has_image_extension("a.heic"));
  CHECK_FALSE(has_image_extension("a.pdf.txt"));
  CHECK_FALSE(has_image_extension("a.png.txt"));
  CHECK(scan_takes("page-01.tif", {false, "page-*"}));
  CHECK_FALSE(scan_takes("a.png", {false, "*.jpg"}));  // a glob replaces the extension filter
}

TEST_CASE("file_scan: a directory's files sorted byte-wise, others skipped, subfolders only when recursive") {
  TempTree t;
  for (const char* name : {"b.png", "a.JPG", "c.jpeg", "Z.png", "\xC3\xA9.png", "notes.txt"}) t.file(name);
  t.dir("sub");
  t.dir("sub/deeper");
  t.file("sub/d.png");
  t.file("sub/deeper/e.jpg");

  const std::string r = t.root;
  // Upper case sorts before lower case and UTF-8 after ASCII: bytes, not locale.
  CHECK(paths_of(expand_inputs({r}, {})) ==
        std::vector<std::string>{r + "/Z.png", r + "/a.JPG", r + "/b.png", r + "/c.jpeg", r + "/\xC3\xA9.png"});
  CHECK(paths_of(expand_inputs({r + "/"}, {}))[0] == r + "/Z.png");  // no doubled slash

  ScanOptions recursive;
  recursive.recursive = true;
  CHECK(paths_of(expand_inputs({r}, recursive)) ==
        std::vector<std::string>{r + "/Z.png", r + "/a.JPG", r + "/b.png", r + "/c.jpeg", r + "/sub/d.png",
                                 r + "/sub/deeper/e.jpg", r + "/\xC3\xA9.png"});

  ScanOptions text_files;
  text_files.glob = "*.txt";
  CHECK(paths_of(expand_inputs({r}, text_files)) == std::vector<std::string>{r + "/notes.txt"});
}

TEST_CASE("file_scan: inputs keep their order; files are kept whatever their name or existence") {
  TempTree t;
  t.file("x.png");
  t.dir("d");
  t.file("d/y.jpg");
  const std::string r = t.root;
  CHECK(paths_of(expand_inputs({r + "/notes.txt", r + "/d", r + "/missing.png", r + "/x.png"}, {})) ==
        std::vector<std::string>{r + "/notes.txt", r + "/d/y.jpg", r + "/missing.png", r + "/x.png"});
}

TEST_CASE("file_scan: a symbolic link loop is scanned once") {
  TempTree t;
  t.dir("a");
  t.file("a/p.png");
  REQUIRE(::symlink("..", (t.root + "/a/up").c_str()) == 0);
  ScanOptions recursive;
  recursive.recursive = true;
  CHECK(paths_of(expand_inputs({t.root}, recursive)) == std::vector<std::string>{t.root + "/a/p.png"});
}

TEST_CASE("file_scan: an unlistable directory becomes an entry with an error") {
  if (::geteuid() == 0) return;  // root lists anything
  TempTree t;
  t.dir("locked");
  ::chmod((t.root + "/locked").c_str(), 0);
  const auto files = expand_inputs({t.root + "/locked"}, {});
  ::chmod((t.root + "/locked").c_str(), 0755);
  REQUIRE(files.size() == 1);
  CHECK(files[0].error.find("locked") != std::string::npos);
}

TEST_CASE("file_scan: paths from stdin lines") {
  CHECK(split_path_lines("a.png\r\n\nmy scan.jpg\n  \nlast") ==
        std::vector<std::string>{"a.png", "my scan.jpg", "  ", "last"});
  CHECK(split_path_lines("").empty());
}
