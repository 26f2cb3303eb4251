#include "qvl/io/prompt_cache_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "qvl/io/sha256.h"

namespace qvl {
namespace {

constexpr const char* kPrefix = "prompt-";
constexpr const char* kSuffix = ".qkv";
constexpr const char* kTempMark = ".qkv.tmp-";
constexpr time_t kStaleTempSeconds = 3600;

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool make_dirs(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) break;
  }
  return true;
}

struct Listed {
  std::string path;
  int64_t bytes;
  timespec used;
};

bool older(const timespec& a, const timespec& b) {
  return a.tv_sec != b.tv_sec ? a.tv_sec < b.tv_sec : a.tv_nsec < b.tv_nsec;
}

// The entries of the folder; stale temporaries are removed on the way.
std::vector<Listed> list_entries(const std::string& dir, bool remove_stale_temps) {
  std::vector<Listed> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  const time_t now = ::time(nullptr);
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (ends_with(name, kSuffix)) {
      out.push_back({path, int64_t(st.st_size), st.st_mtim});
    } else if (remove_stale_temps && name.find(kTempMark) != std::string::npos &&
               now - st.st_mtim.tv_sec > kStaleTempSeconds) {
      ::unlink(path.c_str());
    }
  }
  ::closedir(d);
  return out;
}

}  // namespace

PromptCacheDir::PromptCacheDir(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string PromptCacheDir::path_for(const std::string& key) const {
  return dir_ + "/" + kPrefix + sha256_hex(key).substr(0, 32) + kSuffix;
}

void PromptCacheDir::touch(const std::string& path) const {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // both times to now; failure only costs LRU accuracy
}

bool PromptCacheDir::publish(const std::string& path, int64_t size,
                             const std::function<void(const std::string& tmp)>& write, std::string* error) const {
  if (size > max_bytes_) {
    *error = fmt::format("the entry ({} MB) is larger than the prompt cache's bound ({} MB)", size >> 20,
                         max_bytes_ >> 20);
    return false;
  }
  if (!make_dirs(dir_)) {
    *error = fmt::format("cannot create {}: {}", dir_, std::strerror(errno));
    return false;
  }
  static std::atomic<int> counter{0};
  const std::string tmp = fmt::format("{}.tmp-{}-{}", path, ::getpid(), counter++);
  try {
    write(tmp);
  } catch (const std::exception& e) {
    ::unlink(tmp.c_str());
    *error = e.what();
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = fmt::format("cannot rename {} to {}: {}", tmp, path, std::strerror(errno));
    ::unlink(tmp.c_str());
    return false;
  }
  evict(path);
  return true;
}

int PromptCacheDir::evict(const std::string& keep) const {
  std::vector<Listed> entries = list_entries(dir_, true);
  int64_t total = 0;
  for (const Listed& e : entries) total += e.bytes;
  std::sort(entries.begin(), entries.end(), [](const Listed& a, const Listed& b) { return older(a.used, b.used); });
  int removed = 0;
  for (const Listed& e : entries) {
    if (total <= max_bytes_) break;
    if (e.path == keep) continue;
    // Another process may have evicted it already: its bytes are gone either way.
    if (::unlink(e.path.c_str()) == 0) ++removed;
    total -= e.bytes;
  }
  return removed;
}

int64_t PromptCacheDir::total_bytes() const {
  int64_t total = 0;
  for (const Listed& e : list_entries(dir_, false)) total += e.bytes;
  return total;
}

}  // namespace qvl
