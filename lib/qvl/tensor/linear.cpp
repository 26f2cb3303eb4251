#include "qvl/tensor/linear.h"

#include <ATen/core/grad_mode.h>  // NoGradGuard: ATen.h stopped bringing it in libtorch 2.x
#include <fmt/core.h>

#include <algorithm>
#include <optional>

#include "qvl/error.h"
#include "qvl/kernels/cpu.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/parallel.h"
#include "qvl/tensor/dequant.h"

namespace qvl::tensor {

using kernels::aten_bf16_matmul_is_fast;
using kernels::kMaxVectors;

namespace {

// Weights dequantized per block in a prefill: 16 Mi elements (32 MB in bf16)
// holds any one projection of the 2B model; the tied lm_head goes in blocks.
constexpr int64_t kDequantBlockElements = int64_t(1) << 24;

// Weights widened to float32 per block and thread: 1 Mi floats (4 MB) stay in
// cache while OpenBLAS multiplies them, and no block costs much memory.
constexpr int64_t kWidenBlockElements = int64_t(1) << 20;

// A few rows against bf16 weights (decode steps, small batches, short
// prompts): the weights dominate the cost, so stream them once with the GEMV,
// which reaches the memory bandwidth where a matmul library gets a fraction of
// it. Up to kBf16GemvMaxRows: the 2B decoder's seven projections, 28 layers, 2
// threads, Zen 5 (2026-12-04, qvl_bench_kernels, the weights streamed), the
// dot-product GEMV took 180 ms at 16 rows against oneDNN's 241, and 331 against
// 339 at 32; the avx2 tier's FMA GEMV 952 ms at 32 rows, the widened float32
// matmul 1.1-1.5 s at 15-32 rows (docs/PERFORMANCE.md).
bool use_bf16_gemv(const at::Tensor& x, const at::Tensor& weight) {
  return x.size(0) <= kBf16GemvMaxRows && weight.scalar_type() == at::kBFloat16 && weight.is_contiguous() &&
         weight.dim() == 2;
}

// Whether a matmul in `dtype` must be done in float32 instead (see linear.h).
bool widen_to_float(at::ScalarType dtype) { return dtype == at::kBFloat16 && !aten_bf16_matmul_is_fast(); }

// The GEMVs take and give float32 rows, at most kMaxVectors per call (one
// pass over the weights): longer inputs go through in pieces. out
// is written directly when it is float32 already; the bias (if any) is added
// in float32, before the one rounding to out's dtype, as addmm does.
template <class Gemv>
void gemv_into(at::Tensor& out, const at::Tensor& x, int64_t out_features, const at::Tensor& bias, Gemv gemv) {
  const int64_t rows = x.size(0);
  at::Tensor xf = x.to(at::kFloat).contiguous();
  const bool direct = out.scalar_type() == at::kFloat && out.is_contiguous();
  at::Tensor yf = direct ? out : at::empty({rows, out_features}, at::kFloat);
  for (int64_t first = 0; first < rows; first += kMaxVectors) {
    const int64_t n = std::min(kMaxVectors, rows - first);
    gemv(xf.data_ptr<float>() + first * xf.size(1), yf.data_ptr<float>() + first * out_features, n);
  }
  if (bias.defined()) yf.add_(bias.to(at::kFloat));
  if (!direct) out.copy_(yf);
}

// out = x · Wᵀ (+ bias) in float32, for weights that are not float32: each
// thread takes a share of W's rows (= out's columns) and, a block at a time,
// has `widen(first_row, dense)` write them as floats into `dense` [n, in],
// then multiplies the block with OpenBLAS on that thread. One team of
// threads, the same OpenMP team every other kernel uses: OpenBLAS's own
// threads would spin against it (bf16 sessions keep OpenBLAS at one thread).
// The bias is added in float32 before the one rounding to out's dtype.
template <class Widen>
void widened_linear(at::Tensor& out, const at::Tensor& x, int64_t out_features, const at::Tensor& bias,
                    Widen widen) {
  const int64_t rows = x.size(0), in_features = x.size(1);
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const at::Tensor bias_f = bias.defined() ? bias.to(at::kFloat) : at::Tensor();
  const bool direct = out.scalar_type() == at::kFloat && out.is_contiguous();
  at::Tensor yf = direct ? out : at::empty({rows, out_features}, at::kFloat);
  const int64_t block = std::clamp<int64_t>(kWidenBlockElements / std::max<int64_t>(1, in_features), 16, 1024);
  kernels::for_row_ranges(out_features, in_features * rows, [&](int64_t begin, int64_t end) {
    // Grad mode is per thread: the caller's no-grad does not reach OpenMP's
    // workers, and a weight that requires grad (a TorchScript parameter)
    // would make the out= matmul refuse to run.
    at::NoGradGuard no_grad;
    at::Tensor dense = at::empty({std::min(block, end - begin), in_features}, at::kFloat);
    for (int64_t first = begin; first < end; first += block) {
      const int64_t n = std::min(block, end - first);
      at::Tensor w = dense.narrow(0, 0, n);
      widen(first, w);
      at::Tensor y = yf.narrow(1, first, n);  // rows `out_features` apart: OpenBLAS writes it in place
      if (bias_f.defined()) {
        y.copy_(bias_f.narrow(0, first, n).expand({rows, n}));
        at::addmm_out(y, y, xf, w.t());
      } else {
        at::mm_out(y, xf, w.t());
      }
    }
  });
  if (!direct) out.copy_(yf);
}

// Dense view of `rows` × `cols` elements of x's dtype at the start of scratch.
at::Tensor scratch_matrix(at::Tensor& scratch, int64_t rows, int64_t cols, at::ScalarType dtype) {
  if (!scratch.defined() || scratch.scalar_type() != dtype || scratch.numel() < rows * cols)
    scratch = at::empty({rows * cols}, at::TensorOptions().dtype(dtype));
  return scratch.narrow(0, 0, rows * cols).view({rows, cols});
}

// Long inputs against int8 or int4 weights on the avx512 tier: dequantize a
// block of weight rows to x's dtype and let ATen (oneDNN for bf16) multiply.
template <class Matrix>
void quantized_matmul_into(at::Tensor& out, const at::Tensor& x, const Matrix& w, at::Tensor& scratch) {
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

std::optional<kernels::Storage> storage_of(const at::Tensor& t) {
  if (t.scalar_type() == at::kFloat) return kernels::Storage::F32;
  if (t.scalar_type() == at::kBFloat16) return kernels::Storage::BF16;
  return std::nullopt;
}

// The integer GEMM of each kind of quantized matrix (kernels/int8_gemm.h).
void integer_gemm(const Int8Matrix& w, const void* x, kernels::Storage xs, int64_t x_stride, int64_t rows, void* y,
                  kernels::Storage ys, int64_t y_stride, const float* bias) {
  kernels::gemm_int8(w, x, xs, x_stride, rows, y, ys, y_stride, bias);
}
void integer_gemm(const Int4Matrix& w, const void* x, kernels::Storage xs, int64_t x_stride, int64_t rows, void* y,
                  kernels::Storage ys, int64_t y_stride, const float* bias) {
  kernels::gemm_int4(w, x, xs, x_stride, rows, y, ys, y_stride, bias);
}

// Long inputs against int8 or int4 weights where qvl has an integer GEMM
// kernel for the tier: x quantized per row and group on the fly, int8 ×
// int8 (or 4-bit levels) → int32, the bias (if any) added in float32 before
// the one rounding to out's dtype, out written in place when its rows are dense.
template <class Matrix>
void integer_gemm_into(at::Tensor& out, const at::Tensor& x, const Matrix& w, const at::Tensor& bias) {
  const at::Tensor input = storage_of(x) ? x.contiguous() : x.to(at::kFloat).contiguous();
  const bool direct = storage_of(out) && out.dim() == 2 && out.stride(1) == 1;
  at::Tensor y = direct ? out : at::empty({x.size(0), w.rows}, at::kFloat);
  // The kernel reads w.rows bias values: a shorter bias would be read past its end.
  if (bias.defined() && bias.numel() != w.rows)
    throw Error(fmt::format("linear: bias of {} values for {} outputs", bias.numel(), w.rows));
  const at::Tensor bias_f32 = bias.defined() ? bias.to(at::kFloat).contiguous() : at::Tensor();
  integer_gemm(w, input.data_ptr(), *storage_of(input), input.size(1), input.size(0), y.data_ptr(), *storage_of(y),
               y.stride(0), bias_f32.defined() ? bias_f32.data_ptr<float>() : nullptr);
  if (!direct) out.copy_(y);
}

}  // namespace

void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (use_bf16_gemv(x, weight)) {
    // bf16 activations lose nothing when the avx512 tier's dot-product
    // instruction rounds x to bf16, and it does twice the multiply-adds of
    // the FMA kernel, which matters once a batch makes the GEMV compute-bound.
    const bool x_is_bf16 = x.scalar_type() == at::kBFloat16;
    gemv_into(out, x, weight.size(0), bias, [&](const float* xf, float* yf, int64_t rows) {
      kernels::gemv_bf16(kernels::Bf16Matrix{static_cast<const uint16_t*>(weight.data_ptr()), weight.size(0), weight.size(1)}, xf, yf,
                rows, kernels::active_isa(), x_is_bf16);
    });
    return;  // the bias is in already
  } else if (widen_to_float(weight.scalar_type()) && weight.is_contiguous() && weight.dim() == 2) {
    widened_linear(out, x, weight.size(0), bias, [&](int64_t first, at::Tensor& dense) {
      dense.copy_(weight.narrow(0, first, dense.size(0)));
    });
    return;  // the bias is in already
  } else if (x.size(0) == 1 && x.scalar_type() == at::kFloat) {
    // A single float32 row (a decode step): OpenBLAS sgemm repacks the whole
    // weight on every call, gemv reads it once and runs 2-4x faster.
    at::Tensor row = out.select(0, 0);
    at::mv_out(row, weight, x.select(0, 0));
  } else {
    // addmm rounds x·Wᵀ + b once, as at::linear (and so the reference) does.
    if (bias.defined()) {
      at::addmm_out(out, bias, x, weight.t());
    } else {
      at::mm_out(out, x, weight.t());
    }
    return;
  }
  if (bias.defined()) out.add_(bias);
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  at::Tensor out = at::empty({x.size(0), weight.size(0)}, x.options());
  linear_into(out, x, weight, bias);
  return out;
}

namespace {

// The integer GEMM for long inputs (bias included), where the tier has a
// fast one; elsewhere long inputs go through dequantized rows.
bool has_fast_gemm(const Int8Matrix&) { return kernels::gemm_int8_is_fast(); }
bool has_fast_gemm(const Int4Matrix&) { return kernels::gemm_int4_is_fast(); }
// A prompt's rows up to which the GEMV beats that GEMM (linear.h).
int64_t gemv_max_rows_before_gemm(const Int8Matrix&) { return kInt8GemvMaxRowsBeforeGemm; }
int64_t gemv_max_rows_before_gemm(const Int4Matrix&) {
  return kernels::gemm_int8_uses_vnni() ? kInt4GemvMaxRowsBeforeVnniGemm : kInt4GemvMaxRowsBeforeGemm;
}
template <class Matrix>
bool gemm_into_if_fast(at::Tensor& out, const at::Tensor& x, const Matrix& w, const at::Tensor& bias) {
  if (!has_fast_gemm(w)) return false;
  integer_gemm_into(out, x, w, bias);
  return true;
}

// Short inputs through `gemv` (gemv_int8 or gemv_int4), long ones through
// the integer GEMM where the tier has one, else against the dequantized
// weights, for either kind of quantized matrix.
template <class Matrix, class Gemv>
void quantized_linear_into(at::Tensor& out, const at::Tensor& x, const Matrix& w, const at::Tensor& bias,
                           at::Tensor& scratch, Rows rows, Gemv gemv) {
  const bool gemm_sooner = rows == Rows::Prompt && has_fast_gemm(w);
  if (x.size(0) <= (gemm_sooner ? gemv_max_rows_before_gemm(w) : kInt8GemvMaxRows)) {
    gemv_into(out, x, w.rows, bias, [&](const float* xf, float* yf, int64_t rows) { gemv(w, xf, yf, rows); });
    return;  // the bias is in already
  } else if (gemm_into_if_fast(out, x, w, bias)) {
    return;  // the integer GEMM, bias included
  } else if (x.scalar_type() != at::kFloat && !aten_bf16_matmul_is_fast()) {
    widened_linear(out, x, w.rows, bias, [&](int64_t first, at::Tensor& dense) { dequantize_rows_into(w, first, dense); });
    return;  // the bias is in already
  } else {
    quantized_matmul_into(out, x, w, scratch);
  }
  if (bias.defined()) out.add_(bias);
}

}  // namespace

void linear_into(at::Tensor& out, const at::Tensor& x, const LinearWeight& weight, const at::Tensor& bias,
                 at::Tensor& scratch, Rows rows) {
  if (weight.int4)
    return quantized_linear_into(out, x, *weight.int4, bias, scratch, rows,
                                 [](const Int4Matrix& w, const float* xf, float* yf, int64_t rows) {
                                   kernels::gemv_int4(w, xf, yf, rows);
                                 });
  if (weight.int8)
    return quantized_linear_into(out, x, *weight.int8, bias, scratch, rows,
                                 [](const Int8Matrix& w, const float* xf, float* yf, int64_t rows) {
                                   kernels::gemv_int8(w, xf, yf, rows);
                                 });
  linear_into(out, x, weight.dense, bias);
}

void matmul_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (widen_to_float(a.scalar_type())) {
    const at::Tensor af = a.to(at::kFloat), bf = b.to(at::kFloat);
    out.copy_(a.dim() == 2 ? at::mm(af, bf) : at::bmm(af, bf));
  } else if (a.dim() == 2) {
    at::mm_out(out, a, b);
  } else {
    at::bmm_out(out, a, b);
  }
}

at::Tensor matmul(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor out = a.dim() == 2 ? at::empty({a.size(0), b.size(1)}, a.options())
                                : at::empty({a.size(0), a.size(1), b.size(2)}, a.options());
  matmul_into(out, a, b);
  return out;
}

}  // namespace qvl::tensor
