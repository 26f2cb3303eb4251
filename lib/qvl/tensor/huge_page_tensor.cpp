#include "qvl/tensor/huge_page_tensor.h"

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include "qvl/io/huge_pages.h"

namespace qvl::tensor {

at::Tensor empty_huge_paged(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t bytes = size_t(c10::multiply_integers(sizes)) * options.dtype().itemsize();
  if (bytes < kHugePageBytes) return at::empty(sizes, options);
  void* p = allocate_huge_paged(bytes);
  if (!p) return at::empty(sizes, options);  // let the allocator report it
  return at::from_blob(p, sizes, [bytes](void* data) { free_huge_paged(data, bytes); }, options);
}

}  // namespace qvl::tensor
