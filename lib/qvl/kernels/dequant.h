// int8 weights back to a dense matrix, for the matmuls of long inputs
// (prefill), where multiplying dense blocks beats streaming the int8 weights
// through the GEMV once per 8 rows.
#pragma once
#include <ATen/ATen.h>

#include "qvl/kernels/quant.h"

namespace qvl::kernels {

// Rows [first_row, first_row + out.size(0)) of w, dequantized (q · scale) into
// out [n, w.cols], a contiguous bf16 or float32 tensor. bf16 results are
// rounded to nearest even from the float product.
void dequantize_rows_into(const Int8Matrix& w, int64_t first_row, at::Tensor& out);

}  // namespace qvl::kernels
