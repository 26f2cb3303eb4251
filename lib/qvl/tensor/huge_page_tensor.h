// Tensors for large activations that a run writes once: each in its own
// anonymous mapping, advised to transparent huge pages.
//
// Why: a fresh 4 KiB page costs a page fault at its first write, and on some
// VMs much more than the fault itself (15-22 us per page measured on a PVM
// guest, 0.4-10 us per 4 KiB with huge pages: docs/PERFORMANCE.md, "First
// access to a page"). The vision tower's activations for one 640x480 image
// are ~45 MB, ~11,000 such pages. Elsewhere huge pages only save the faults.
#pragma once
#include <ATen/core/Tensor.h>

namespace qvl::tensor {

// Like at::empty(sizes, options) on the CPU; below 2 MB it is at::empty.
at::Tensor empty_huge_paged(at::IntArrayRef sizes, const at::TensorOptions& options);

}  // namespace qvl::tensor
