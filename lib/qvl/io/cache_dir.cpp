#include "qvl/io/cache_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "qvl/error.h"

namespace qvl {
namespace {

// mkdir -p; false when the folder cannot be made or written.
bool make_writable_dir(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) break;
  }
  return ::access(dir.c_str(), W_OK) == 0;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The user's cache folder for qvl, and the folder that must already be there
// for it to be used: qvl makes cache folders inside a home folder, never a
// home folder itself ($HOME naming one that is gone, or a typo).
struct UserCache {
  std::string root, base;
};

UserCache user_cache() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    const std::string dir = xdg;
    const size_t slash = dir.find_last_of('/', dir.find_last_not_of('/'));
    return {dir + "/qvl", slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash)};
  }
  if (const char* home = std::getenv("HOME"); home && *home) return {std::string(home) + "/.cache/qvl", home};
  return {};
}

}  // namespace

std::string model_cache_dir(const std::string& model_dir, const std::string& fingerprint, const std::string& chosen_dir) {
  std::string chosen = chosen_dir;
  if (chosen.empty())
    if (const char* env = std::getenv("QVL_CACHE_DIR"); env && *env) chosen = env;
  if (!chosen.empty()) {
    if (!make_writable_dir(chosen)) throw Error("cache folder " + chosen + " cannot be created or written");
    return chosen;
  }
  const std::string beside_model = model_dir + "/.qvl-cache";
  if (make_writable_dir(beside_model)) return beside_model;
  const UserCache user = user_cache();
  const std::string per_model = user.root + "/" + fingerprint;
  if (user.root.empty() || !is_dir(user.base) || !make_writable_dir(per_model))
    throw Error("no writable cache folder: neither " + beside_model + " nor " +
                (user.root.empty() ? std::string("~/.cache/qvl") : per_model) +
                (user.root.empty() || is_dir(user.base) ? "" : " (" + user.base + " does not exist)") +
                " (set $HOME or pass a cache folder)");
  return per_model;
}

}  // namespace qvl
