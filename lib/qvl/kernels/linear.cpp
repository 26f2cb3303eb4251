#include "qvl/kernels/linear.h"

#include <algorithm>

#include "qvl/kernels/dequant.h"
#include "qvl/kernels/gemv.h"

namespace qvl::kernels {
namespace {

// Weights dequantized per block in a prefill: 16 Mi elements (32 MB in bf16)
// holds any one projection of the 2B model; the tied lm_head goes in blocks.
constexpr int64_t kDequantBlockElements = int64_t(1) << 24;

// A few rows against bf16 weights (decode steps, small batches): the weights
// dominate the cost, so stream them once with the AVX-512 GEMV, which reaches
// the memory bandwidth where oneDNN's matmul gets about a third of it.
bool use_bf16_gemv(const at::Tensor& x, const at::Tensor& weight) {
  return x.size(0) <= kBf16GemvMaxRows && weight.scalar_type() == at::kBFloat16 && weight.is_contiguous() &&
         weight.dim() == 2 && cpu_has_avx512();
}

// The GEMVs take and give float32 rows, at most kMaxBatch per call: longer
// inputs go through in pieces (each piece reads the weights once more). out
// is written directly when it is float32 already.
template <class Gemv>
void gemv_into(at::Tensor& out, const at::Tensor& x, int64_t out_features, Gemv gemv) {
  const int64_t rows = x.size(0);
  at::Tensor xf = x.to(at::kFloat).contiguous();
  const bool direct = out.scalar_type() == at::kFloat && out.is_contiguous();
  at::Tensor yf = direct ? out : at::empty({rows, out_features}, at::kFloat);
  for (int64_t first = 0; first < rows; first += kMaxBatch) {
    const int64_t n = std::min(kMaxBatch, rows - first);
    gemv(xf.data_ptr<float>() + first * xf.size(1), yf.data_ptr<float>() + first * out_features, n);
  }
  if (!direct) out.copy_(yf);
}

// Dense view of `rows` × `cols` elements of x's dtype at the start of scratch.
at::Tensor scratch_matrix(at::Tensor& scratch, int64_t rows, int64_t cols, at::ScalarType dtype) {
  if (!scratch.defined() || scratch.scalar_type() != dtype || scratch.numel() < rows * cols)
    scratch = at::empty({rows * cols}, at::TensorOptions().dtype(dtype));
  return scratch.narrow(0, 0, rows * cols).view({rows, cols});
}

void int8_matmul_into(at::Tensor& out, const at::Tensor& x, const Int8Matrix& w, at::Tensor& scratch) {
  const at::ScalarType dtype = x.scalar_type() == at::kFloat ? at::kFloat : at::kBFloat16;
  const at::Tensor input = x.to(dtype);
  const int64_t block = std::clamp<int64_t>(kDequantBlockElements / std::max<int64_t>(1, w.cols), 1, w.rows);
  for (int64_t first = 0; first < w.rows; first += block) {
    const int64_t n = std::min(block, w.rows - first);
    at::Tensor dense = scratch_matrix(scratch, n, w.cols, dtype);
    dequantize_rows_into(w, first, dense);
    if (n == w.rows && out.scalar_type() == dtype) {
      at::mm_out(out, input, dense.t());
    } else {
      out.narrow(1, first, n).copy_(at::mm(input, dense.t()));
    }
  }
}

// bf16 activations lose nothing when the dot-product instruction rounds them
// to bf16, and it does twice the multiply-adds per instruction of the FMA
// path, which matters once a batch makes the GEMV compute-bound.
Bf16Path bf16_path_for(const at::Tensor& x) {
  return x.scalar_type() == at::kBFloat16 && cpu_has_avx512_bf16() ? Bf16Path::Avx512DotBf16 : Bf16Path::Best;
}

}  // namespace

void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (use_bf16_gemv(x, weight)) {
    const Bf16Path path = bf16_path_for(x);
    gemv_into(out, x, weight.size(0), [&](const float* xf, float* yf, int64_t rows) {
      gemv_bf16(Bf16Matrix{static_cast<const uint16_t*>(weight.data_ptr()), weight.size(0), weight.size(1)}, xf, yf,
                rows, path);
    });
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

void linear_into(at::Tensor& out, const at::Tensor& x, const LinearWeight& weight, const at::Tensor& bias,
                 at::Tensor& scratch) {
  if (!weight.int8) return linear_into(out, x, weight.dense, bias);
  const Int8Matrix& w = *weight.int8;
  if (x.size(0) <= kInt8GemvMaxRows) {
    gemv_into(out, x, w.rows, [&](const float* xf, float* yf, int64_t rows) { gemv_int8(w, xf, yf, rows); });
  } else {
    int8_matmul_into(out, x, w, scratch);
  }
  if (bias.defined()) out.add_(bias);
}

}  // namespace qvl::kernels
