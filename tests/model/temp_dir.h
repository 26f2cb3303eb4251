// A fresh folder under $TMPDIR for a model test, emptied and removed at the end.
#pragma once
#include <dirent.h>
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace qvl_test {

struct TempDir {
  std::string path;
  // prefix: names the folder, e.g. "qvl-vision-test".
  explicit TempDir(const std::string& prefix) {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/" + prefix + "-XXXXXX";
    REQUIRE(::mkdtemp(path.data()) != nullptr);
  }
  ~TempDir() {
    for (const std::string& name : files()) ::unlink((path + "/" + name).c_str());
    ::rmdir(path.c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The names in it, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') out.push_back(e->d_name);
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

}  // namespace qvl_test
