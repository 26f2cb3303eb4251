// The folder of prompt-cache entries (io/prompt_entry.h): a file name per
// key, atomic publishing, and a size bound kept by evicting the least
// recently used entries. Several processes may use one folder at once: an
// entry appears whole (written aside, then renamed) and a reader keeps the
// file it opened even when it is replaced or evicted meanwhile.
//
// "Recently used" is the file's modification time, which a hit sets to now:
// access times are not updated on most mounts (relatime, noatime).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace qvl {

class PromptCacheDir {
 public:
  PromptCacheDir(std::string dir, int64_t max_bytes);

  const std::string& dir() const { return dir_; }
  int64_t max_bytes() const { return max_bytes_; }

  // <dir>/prompt-<32 hex digits of sha256(key)>.qkv
  std::string path_for(const std::string& key) const;

  // Marks an entry as just used. Best effort.
  void touch(const std::string& path) const;

  // Creates the folder if needed, has `write` fill a temporary file beside
  // `path`, renames it over `path`, then evicts others down to the bound.
  // An entry of `size` bytes larger than the bound is not written. Returns
  // false with *error set (the temporary removed) when anything fails;
  // exceptions from `write` count as failures.
  bool publish(const std::string& path, int64_t size, const std::function<void(const std::string& tmp)>& write,
               std::string* error) const;

  // Removes the least recently used entries until the entries total at most
  // max_bytes(), never `keep`; also removes temporaries left by writers that
  // died more than an hour ago. Returns how many entries it removed.
  int evict(const std::string& keep = "") const;

  // Total bytes of the entries in the folder.
  int64_t total_bytes() const;

 private:
  std::string dir_;
  int64_t max_bytes_;
};

}  // namespace qvl
