#include "qvl/tensor/dequant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "qvl/error.h"

namespace qvl::tensor {

namespace {

// Checks out against w's shape; returns its storage.
template <class Matrix>
kernels::Storage checked_storage(const Matrix& w, const char* kind, int64_t first_row, const at::Tensor& out) {
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  if ((!bf16 && out.scalar_type() != at::kFloat) || out.dim() != 2 || !out.is_contiguous() ||
      out.size(1) != w.cols || first_row < 0 || first_row + out.size(0) > w.rows)
    throw Error(fmt::format("cannot dequantize rows {}..{} of a {}x{} {} matrix into a {} tensor of shape [{}]",
                            first_row, first_row + (out.dim() > 0 ? out.size(0) : 0), w.rows, w.cols, kind,
                            c10::toString(out.scalar_type()), fmt::join(out.sizes(), ", ")));
  return bf16 ? kernels::Storage::BF16 : kernels::Storage::F32;
}

}  // namespace

void dequantize_rows_into(const kernels::Int8Matrix& w, int64_t first_row, at::Tensor& out) {
  kernels::dequantize_rows(w, first_row, out.size(0), checked_storage(w, "int8", first_row, out), out.data_ptr());
}

void dequantize_rows_into(const kernels::Int4Matrix& w, int64_t first_row, at::Tensor& out) {
  kernels::dequantize_int4_rows(w, first_row, out.size(0), checked_storage(w, "int4", first_row, out),
                                out.data_ptr());
}

}  // namespace qvl::tensor
