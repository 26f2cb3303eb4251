// y = x · Wᵀ (+ b) into a preallocated output, taking the fastest libtorch 1.13
// route for the shape and dtype on CPU. The decoder's one seam for matmuls.
#pragma once
#include <ATen/ATen.h>

namespace qvl::kernels {

// x [L, in], weight [out, in], bias [out] or undefined, out [L, out] (contiguous).
void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace qvl::kernels
