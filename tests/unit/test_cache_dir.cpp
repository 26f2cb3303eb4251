// The one cache-folder policy (io/cache_dir.h) shared by the vision module and
// the int8 weights: an explicit folder, else $QVL_CACHE_DIR, else beside the
// model, else the user's cache folder.
#include "qvl/io/cache_dir.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "qvl/error.h"

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Sets an environment variable for one scope, restoring what was there.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    if (value) ::setenv(n, value, 1); else ::unsetenv(n);
  }
  ~ScopedEnv() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1); else ::unsetenv(name.c_str());
  }
};

struct Scratch {
  std::string path;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/qvl-cache-dir-test-XXXXXX";
    REQUIRE(::mkdtemp(path.data()) != nullptr);
  }
  ~Scratch() { std::system(("rm -rf '" + path + "'").c_str()); }
};

}  // namespace

TEST_CASE("model cache folder: an explicit folder wins, is created and must be writable") {
  Scratch s;
  ScopedEnv env("QVL_CACHE_DIR", (s.path + "/from-env").c_str());
  const std::string chosen = s.path + "/a/b/c";
  CHECK(qvl::model_cache_dir(s.path + "/model", "fp", chosen) == chosen);
  CHECK(is_dir(chosen));
  CHECK_FALSE(is_dir(s.path + "/from-env"));
  // /proc refuses new folders even to root.
  CHECK_THROWS_WITH_AS(qvl::model_cache_dir(s.path + "/model", "fp", "/proc/qvl-cache-test"),
                       doctest::Contains("/proc/qvl-cache-test"), qvl::Error);
}

TEST_CASE("model cache folder: then $QVL_CACHE_DIR, then beside the model, then the user's cache") {
  Scratch s;
  ::mkdir((s.path + "/model").c_str(), 0755);
  {
    ScopedEnv env("QVL_CACHE_DIR", (s.path + "/from-env").c_str());
    CHECK(qvl::model_cache_dir(s.path + "/model", "fp") == s.path + "/from-env");
  }
  ScopedEnv no_env("QVL_CACHE_DIR", nullptr);
  ScopedEnv xdg("XDG_CACHE_HOME", (s.path + "/xdg").c_str());
  CHECK(qvl::model_cache_dir(s.path + "/model", "fp") == s.path + "/model/.qvl-cache");
  CHECK(is_dir(s.path + "/model/.qvl-cache"));
  // A model folder nothing can be written into: one folder per model fingerprint.
  CHECK(qvl::model_cache_dir("/proc/qvl-no-such-model", "abc123") == s.path + "/xdg/qvl/abc123");
  CHECK(is_dir(s.path + "/xdg/qvl/abc123"));
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", (s.path + "/home").c_str());
  // A home folder that is not there is never made: as if it could not be written.
  CHECK_THROWS_WITH_AS(qvl::model_cache_dir("/proc/qvl-no-such-model", "abc123"),
                       doctest::Contains((s.path + "/home does not exist").c_str()), qvl::Error);
  CHECK_FALSE(is_dir(s.path + "/home"));
  {
    ScopedEnv gone_xdg("XDG_CACHE_HOME", (s.path + "/gone/.cache").c_str());
    CHECK_THROWS_AS(qvl::model_cache_dir("/proc/qvl-no-such-model", "abc123"), qvl::Error);
    CHECK_FALSE(is_dir(s.path + "/gone"));
  }
  ::mkdir((s.path + "/home").c_str(), 0755);
  CHECK(qvl::model_cache_dir("/proc/qvl-no-such-model", "abc123") == s.path + "/home/.cache/qvl/abc123");
  ScopedEnv no_home("HOME", nullptr);
  CHECK_THROWS_WITH_AS(qvl::model_cache_dir("/proc/qvl-no-such-model", "abc123"),
                       doctest::Contains("no writable cache folder"), qvl::Error);
}
