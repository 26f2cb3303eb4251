#include "qvl/kernels/dequant.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"

namespace qvl::kernels {
namespace {

// Round to nearest even; q · scale is always finite, so NaN needs no care.
inline uint16_t round_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

// One group of a row at a time, so the inner loops have a fixed scale and
// vectorize; written once per output type.
template <class Out, class Convert>
void dequantize_row(const Int8Matrix& w, int64_t row, Out* out, Convert convert) {
  const int8_t* q = w.weights + row * w.padded_cols;
  const float* scales = w.scales + row * w.groups();
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * w.group_size, last = std::min(first + w.group_size, w.cols);
    const float scale = scales[g];
    for (int64_t k = first; k < last; ++k) out[k] = convert(float(q[k]) * scale);
  }
}

}  // namespace

void dequantize_rows_into(const Int8Matrix& w, int64_t first_row, at::Tensor& out) {
  const bool bf16 = out.scalar_type() == at::kBFloat16;
  if ((!bf16 && out.scalar_type() != at::kFloat) || out.dim() != 2 || !out.is_contiguous() ||
      out.size(1) != w.cols || first_row < 0 || first_row + out.size(0) > w.rows)
    throw Error(fmt::format("cannot dequantize rows {}..{} of a {}x{} int8 matrix into a {} tensor of shape [{}]",
                            first_row, first_row + (out.dim() > 0 ? out.size(0) : 0), w.rows, w.cols,
                            c10::toString(out.scalar_type()), fmt::join(out.sizes(), ", ")));
  const int64_t rows = out.size(0);
  // Split as the GEMVs split their rows (at::parallel_for would run serially here).
  if (bf16) {
    uint16_t* dst = static_cast<uint16_t*>(out.data_ptr());
    detail::for_row_ranges(rows, w.cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) dequantize_row(w, first_row + r, dst + r * w.cols, round_to_bf16);
    });
  } else {
    float* dst = out.data_ptr<float>();
    detail::for_row_ranges(rows, w.cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        dequantize_row(w, first_row + r, dst + r * w.cols, [](float v) { return v; });
    });
  }
}

}  // namespace qvl::kernels
