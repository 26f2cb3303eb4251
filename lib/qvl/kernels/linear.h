// y = x · Wᵀ (+ b) into a preallocated output, taking the fastest libtorch 1.13
// route for the shape and dtype on CPU. The decoder's one seam for matmuls.
#pragma once
#include <ATen/ATen.h>

#include "qvl/kernels/quant.h"

namespace qvl::kernels {

// A projection's weight [out, in]: a dense tensor (often a view of the mmapped
// checkpoint) or an int8 matrix with per-group scales (weight-only int8).
struct LinearWeight {
  at::Tensor dense;
  const Int8Matrix* int8 = nullptr;  // owned elsewhere, e.g. by a mapped Int8Cache

  LinearWeight() = default;
  // Implicit on purpose: wherever a weight is expected, a tensor is one.
  LinearWeight(at::Tensor weight) : dense(std::move(weight)) {}
  explicit LinearWeight(const Int8Matrix& weight) : int8(&weight) {}
  bool defined() const { return dense.defined() || int8 != nullptr; }
};

// Up to this many rows, bf16 weights are multiplied by the GEMV (in pieces of
// kMaxBatch rows) rather than by oneDNN.
constexpr int64_t kBf16GemvMaxRows = kMaxBatch;
// Up to this many rows, int8 weights are multiplied by the GEMV a piece of
// kMaxBatch rows at a time (a chat follow-up question, a short prompt):
// cheaper than dequantizing every weight to bf16 for one matmul.
constexpr int64_t kInt8GemvMaxRows = 4 * kMaxBatch;

// x [L, in], weight [out, in], bias [out] or undefined, out [L, out] (contiguous).
void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// The same for either kind of weight. Int8 weights run gemv_int8 for short
// inputs (decode steps, batches, short follow-up prompts: up to
// kInt8GemvMaxRows rows, in pieces of kMaxBatch); longer inputs (prefill) are multiplied by ATen against
// the weight dequantized to x's dtype, a block of weight rows at a time, in
// `scratch`: grown when needed and kept by the caller for reuse, so no dense
// copy of the weights outlives the call's working set.
void linear_into(at::Tensor& out, const at::Tensor& x, const LinearWeight& weight, const at::Tensor& bias,
                 at::Tensor& scratch);

}  // namespace qvl::kernels
