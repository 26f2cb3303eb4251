#include "qvl/tensor/huge_page_tensor.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <sys/mman.h>

#include <cstdint>

namespace qvl::tensor {

at::Tensor empty_huge_paged(at::IntArrayRef sizes, const at::TensorOptions& options) {
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t bytes = size_t(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  if (bytes < kHugePage) return at::empty(sizes, options);
  // A huge page needs a 2 MB aligned range: map one huge page more than
  // needed and start at the first boundary inside.
  const size_t length = (bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return at::empty(sizes, options);  // let the allocator report it
  const uintptr_t start = (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
#ifdef MADV_HUGEPAGE
  ::madvise(reinterpret_cast<void*>(start), length - kHugePage, MADV_HUGEPAGE);  // advice only
#endif
  return at::from_blob(
      reinterpret_cast<void*>(start), sizes, [base, length](void*) { ::munmap(base, length); }, options);
}

}  // namespace qvl::tensor
