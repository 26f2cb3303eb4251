// int8 weights back to dense rows (quant.h's dequantize_rows).
#include <fmt/core.h>

#include <algorithm>

#include "qvl/error.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/quant.h"
#include "qvl/kernels/simd_portable.h"

namespace qvl::kernels {
namespace {

// One group of a row at a time, so the inner loops have a fixed scale and
// vectorize; written once for both storages.
template <class T>
void dequantize_row(const Int8Matrix& w, int64_t row, T* out) {
  const int8_t* q = w.weights + row * w.padded_cols;
  const float* scales = w.scales + row * w.groups();
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * w.group_size, last = std::min(first + w.group_size, w.cols);
    const float scale = scales[g];
    for (int64_t k = first; k < last; ++k) simd_portable::store(out, k, float(q[k]) * scale);
  }
}

template <class T>
void dequantize_rows(const Int8Matrix& w, int64_t first_row, int64_t rows, T* out) {
  for_row_ranges(rows, w.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) dequantize_row(w, first_row + r, out + r * w.cols);
  });
}

}  // namespace

void dequantize_rows(const Int8Matrix& w, int64_t first_row, int64_t rows, Storage s, void* out) {
  if (first_row < 0 || rows < 0 || first_row > w.rows || rows > w.rows - first_row)
    throw Error(fmt::format("cannot dequantize rows {}..{} of a {}x{} int8 matrix", first_row, first_row + rows,
                            w.rows, w.cols));
  if (s == Storage::F32)
    dequantize_rows(w, first_row, rows, static_cast<float*>(out));
  else
    dequantize_rows(w, first_row, rows, static_cast<uint16_t*>(out));
}

}  // namespace qvl::kernels
