// Tensors for large activations that a run writes once: each in its own
// anonymous mapping, advised to transparent huge pages (io/huge_pages.h says
// why). The vision tower's activations for one 640x480 image are ~45 MB,
// ~11,000 small pages.
#pragma once
#include <ATen/core/Tensor.h>

namespace qvl::tensor {

// Like at::empty(sizes, options) on the CPU; below 2 MB it is at::empty.
at::Tensor empty_huge_paged(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace qvl::tensor
