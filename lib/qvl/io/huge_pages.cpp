#include "qvl/io/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace qvl {
namespace {

size_t whole_huge_pages(size_t bytes) { return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes; }

}  // namespace

void* allocate_huge_paged(size_t bytes) {
  if (bytes < kHugePageBytes) return std::malloc(bytes > 0 ? bytes : 1);
  // A huge page needs a 2 MB aligned range: map one huge page more than
  // needed and give back what lies outside the first aligned range.
  const size_t length = whole_huge_pages(bytes);
  if (length + kHugePageBytes < length) return nullptr;
  void* mapped = ::mmap(nullptr, length + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const uintptr_t base = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t start = (base + kHugePageBytes - 1) & ~uintptr_t(kHugePageBytes - 1);
  if (start > base) ::munmap(mapped, start - base);
  const uintptr_t end = base + length + kHugePageBytes;
  if (end > start + length) ::munmap(reinterpret_cast<void*>(start + length), end - (start + length));
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(start), length, MADV_HUGEPAGE);  // advice only
#endif
  return reinterpret_cast<void*>(start);
}

void free_huge_paged(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kHugePageBytes) std::free(p);
  else ::munmap(p, whole_huge_pages(bytes));
}

}  // namespace qvl
