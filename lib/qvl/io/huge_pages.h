// Memory for large buffers that a run writes once (activations, pixels, keys
// and values), each in its own anonymous mapping advised to transparent huge
// pages.
//
// Why: a fresh 4 KiB page costs a page fault at its first write, and on some
// VMs much more than the fault itself (15-22 us per page measured on a PVM
// guest, 0.4-10 us per 4 KiB with huge pages: docs/PERFORMANCE.md, "First
// access to a page"). Elsewhere huge pages only save the faults.
#pragma once
#include <cstddef>
#include <limits>
#include <new>

namespace qvl {

inline constexpr size_t kHugePageBytes = size_t(2) << 20;

// At least `bytes` of memory: a 2 MB aligned mapping of whole huge pages, or
// malloc's memory below kHugePageBytes. Returns nullptr when the system has
// no memory left.
void* allocate_huge_paged(size_t bytes);
// Frees what allocate_huge_paged(bytes) returned, with the same `bytes`.
void free_huge_paged(void* p, size_t bytes);

// For std::vector: std::vector<float, HugePageAllocator<float>>.
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    void* p = allocate_huge_paged(n * sizeof(T));
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept { free_huge_paged(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const HugePageAllocator<U>&) const noexcept { return false; }
};

}  // namespace qvl
