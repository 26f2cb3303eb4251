#include "qvl/kernels/linear.h"

#include "qvl/kernels/gemv.h"

namespace qvl::kernels {
namespace {

// A few rows against bf16 weights (decode steps, small batches): the weights
// dominate the cost, so stream them once with the AVX-512 GEMV, which reaches
// the memory bandwidth where oneDNN's matmul gets about a third of it.
bool use_bf16_gemv(const at::Tensor& x, const at::Tensor& weight) {
  return x.size(0) <= kMaxBatch && weight.scalar_type() == at::kBFloat16 && weight.is_contiguous() &&
         weight.dim() == 2 && cpu_has_avx512();
}

void bf16_gemv_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  const int64_t rows = x.size(0);
  at::Tensor xf = x.to(at::kFloat).contiguous();
  const bool direct = out.scalar_type() == at::kFloat && out.is_contiguous();
  at::Tensor yf = direct ? out : at::empty({rows, weight.size(0)}, at::kFloat);
  Bf16Matrix w{static_cast<const uint16_t*>(weight.data_ptr()), weight.size(0), weight.size(1)};
  gemv_bf16(w, xf.data_ptr<float>(), yf.data_ptr<float>(), rows);
  if (!direct) out.copy_(yf);
}

}  // namespace

void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (use_bf16_gemv(x, weight)) {
    bf16_gemv_into(out, x, weight);
  } else if (x.size(0) == 1 && x.scalar_type() == at::kFloat) {
    // A single float32 row (a decode step): OpenBLAS sgemm repacks the whole
    // weight on every call, gemv reads it once and runs 2-4x faster.
    at::Tensor row = out.select(0, 0);
    at::mv_out(row, weight, x.select(0, 0));
  } else {
    at::mm_out(out, x, weight.t());
  }
  if (bias.defined()) out.add_(bias);
}

}  // namespace qvl::kernels
