#include "qvl/kernels/linear.h"

namespace qvl::kernels {

void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (x.size(0) == 1 && x.scalar_type() == at::kFloat) {
    // A single float32 row (a decode step): OpenBLAS sgemm repacks the whole
    // weight on every call, gemv reads it once and runs 2-4x faster. bf16 stays
    // on the matmul path, which oneDNN serves well at any row count.
    at::Tensor row = out.select(0, 0);
    at::mv_out(row, weight, x.select(0, 0));
  } else {
    at::mm_out(out, x, weight.t());
  }
  if (bias.defined()) out.add_(bias);
}

}  // namespace qvl::kernels
