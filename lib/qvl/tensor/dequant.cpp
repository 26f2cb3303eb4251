#include "qvl/tensor/dequant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qvl/error.h"

namespace qvl::tensor {

void dequantize_rows_into(const kernels::Int8Matrix& w, int64_t first_row, at::Tensor& out) {
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  if ((!bf16 && out.scalar_type() != at::kFloat) || out.dim() != 2 || !out.is_contiguous() ||
      out.size(1) != w.cols || first_row < 0 || first_row + out.size(0) > w.rows)
    throw Error(fmt::format("cannot dequantize rows {}..{} of a {}x{} int8 matrix into a {} tensor of shape [{}]",
                            first_row, first_row + (out.dim() > 0 ? out.size(0) : 0), w.rows, w.cols,
                            c10::toString(out.scalar_type()), fmt::join(out.sizes(), ", ")));
  kernels::dequantize_rows(w, first_row, out.size(0), bf16 ? kernels::Storage::BF16 : kernels::Storage::F32,
                           out.data_ptr());
}

}  // namespace qvl::tensor
