// kernels::dequantize_rows into a tensor, for linear.cpp's prefill matmuls.
#pragma once
#include <ATen/ATen.h>

#include "qvl/kernels/quant.h"
#include "qvl/kernels/quant4.h"

namespace qvl::tensor {

// Rows [first_row, first_row + out.size(0)) of w, dequantized (q · scale) into
// out [n, w.cols], a contiguous bf16 or float32 tensor. bf16 results are
// rounded to nearest even from the float product. Throws qvl::Error on any
// other tensor or rows outside w.
void dequantize_rows_into(const kernels::Int8Matrix& w, int64_t first_row, at::Tensor& out);
// The same for a 4-bit matrix (u · scale + min).
void dequantize_rows_into(const kernels::Int4Matrix& w, int64_t first_row, at::Tensor& out);

}  // namespace qvl::tensor
