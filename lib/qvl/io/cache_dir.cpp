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

std::string user_cache_root() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/qvl";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/qvl";
  return "";
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
  const std::string root = user_cache_root();
  const std::string per_model = root + "/" + fingerprint;
  if (root.empty() || !make_writable_dir(per_model))
    throw Error("no writable cache folder: neither " + beside_model + " nor " +
                (root.empty() ? std::string("~/.cache/qvl") : per_model) + " (set $HOME or pass a cache folder)");
  return per_model;
}

}  // namespace qvl
