#include "qvl/decoder/quant_cache.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "qvl/error.h"
#include "qvl/io/cache_dir.h"
#include "qvl/io/paths.h"

namespace qvl {

void release_pages(const TensorView& v) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(v.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(v.data) + v.nbytes;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory: failure only costs memory
}

void write_beside_then_rename(const std::string& path, const std::function<void(const std::string& own)>& write) {
  // The writers go through "<name>.tmp" themselves (and remove it on failure).
  const std::string own = fmt::format("{}.{}", path, ::getpid());
  try {
    write(own);
  } catch (...) {
    std::remove((own + ".tmp").c_str());
    throw;
  }
  if (std::rename(own.c_str(), path.c_str()) != 0) {
    std::remove(own.c_str());
    throw Error(fmt::format("cannot move the weight cache {} into place as {}", own, path));
  }
}

std::string quant_cache_dir(const std::string& model_dir, const std::string& fingerprint, const std::string& chosen,
                            const NoteCallback& on_note) {
  try {
    return model_cache_dir(model_dir, fingerprint, chosen);
  } catch (const Error& e) {
    static std::mutex mutex;
    static std::set<std::string> said;
    const std::lock_guard<std::mutex> lock(mutex);
    if (on_note && said.insert(e.what()).second)
      on_note(std::string("weight cache off: ") + e.what() + "; the weights are quantized in memory for this run");
    return "";
  }
}

bool quant_cache_exists(const std::string& path) { return is_regular_file(path); }

namespace {

// Why `path` could have been written by someone else, or "". `who`: how the
// note names it ("it", "its folder ...").
std::string writable_by_others(const std::string& path, const std::string& who) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return fmt::format("{} cannot be inspected: {}", who, std::strerror(errno));
  if (st.st_uid != ::geteuid() && st.st_uid != 0) return fmt::format("{} belongs to another user (uid {})", who, st.st_uid);
  // A sticky folder (as /tmp) lets others add files but not replace ours.
  const bool sticky_folder = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_folder) return who + " can be written by other users";
  return "";
}

}  // namespace

std::string untrusted_cache_reason(const std::string& path) {
  if (const char* trust = std::getenv("QVL_TRUST_CACHE"); trust && std::strcmp(trust, "1") == 0) return "";
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string reason = writable_by_others(path, "it");
  if (reason.empty()) reason = writable_by_others(folder, "its folder " + folder);
  return reason.empty() ? "" : reason + " (QVL_TRUST_CACHE=1 uses it anyway)";
}

}  // namespace qvl
