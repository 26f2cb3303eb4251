#include "qvl/decoder/quant_cache.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>

#include "qvl/error.h"
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

bool quant_cache_exists(const std::string& path) { return is_regular_file(path); }

}  // namespace qvl
