// Every matmul of qvl goes through here: y = x · Wᵀ (+ b) and the attention
// products, taking the fastest route for the shape, dtype and CPU tier
// (kernels/cpu.h). The torch side of the kernels: at::Tensor in and out.
//   - a few rows against bf16 or int8 weights: qvl's GEMVs (every tier);
//   - bf16 on the avx512 tier: ATen, which sends bf16 matmuls to oneDNN;
//   - bf16 on any other tier: float32 through OpenBLAS, the bf16 operands
//     widened a block at a time (ATen's own bf16 matmul, all that libtorch 1.13
//     has for bf16 without AVX-512, runs at ~1 GFLOP/s), so no float32 copy
//     of the weights ever exists whole;
//   - float32: ATen (OpenBLAS).
#pragma once
#include <ATen/ATen.h>

#include "qvl/kernels/quant.h"
#include "qvl/kernels/quant4.h"

namespace qvl::tensor {

using kernels::Int4Matrix;
using kernels::Int8Matrix;

// A projection's weight [out, in]: a dense tensor (often a view of the mmapped
// checkpoint), an int8 matrix with per-group scales (weight-only int8) or a
// 4-bit one (kernels/quant4.h).
struct LinearWeight {
  at::Tensor dense;
  const Int8Matrix* int8 = nullptr;  // owned elsewhere, e.g. by a mapped Int8Cache
  const Int4Matrix* int4 = nullptr;  // owned elsewhere, e.g. by a mapped Int4Cache

  LinearWeight() = default;
  // Implicit on purpose: wherever a weight is expected, a tensor is one.
  LinearWeight(at::Tensor weight) : dense(std::move(weight)) {}
  explicit LinearWeight(const Int8Matrix& weight) : int8(&weight) {}
  explicit LinearWeight(const Int4Matrix& weight) : int4(&weight) {}
  bool defined() const { return dense.defined() || int8 != nullptr || int4 != nullptr; }
};

// Up to this many rows, bf16 weights are multiplied by the GEMV (one pass
// over the weights, kernels/gemv.h) rather than by a matmul, on every tier: a
// warm prompt-cache question prefills ~15 new tokens; measurements in
// linear.cpp.
constexpr int64_t kBf16GemvMaxRows = kernels::kMaxVectors;
// Up to this many rows, int8 weights are multiplied by the GEMV, in one pass
// over the weights (a chat follow-up question, a short prompt): cheaper than
// dequantizing every weight to bf16 for one matmul.
constexpr int64_t kInt8GemvMaxRows = kernels::kMaxVectors;
// Where the tier has a fast int8 GEMM (kernels/int8_gemm.h), only up to this
// many: the GEMV's work per row grows faster than the GEMM's. Streaming the
// 2B decoder's weights on a Zen 5 (qvl_bench_kernels "int8 group 128", 2
// threads), GEMV against GEMM: avx512-vnni 60 vs 63 ms at 5 rows, 65 vs 68 at
// 6, 110 vs 81 at 8, 206 vs 102 at 16; avx2 102 vs 127 at 5, 159 vs 139 at 6.
constexpr int64_t kInt8GemvMaxRowsBeforeGemm = 5;
// The same for int4 weights (kernels::gemm_int4, where the tier has it): its
// GEMM unpacks the levels as it packs each panel, a cost per weight the
// GEMV's work per row needs a few more rows to outgrow, and more without
// VNNI (avx2's vpmaddubsw takes four instructions for one vpdpbusd). Same
// bench ("int4 group 64"), GEMV against GEMM: avx512-vnni 99 vs 110 ms at 8
// rows, 174 vs 143 at 16; avx2-vnni (whose GEMV is avx2's) 128 vs 140 at 8,
// 256 vs 205 at 16; avx2 256 vs 301 at 16, 561 vs ~470 at 32.
// (The neon tier's sdot GEMM takes the second, unmeasured: its GEMV and GEMM
// have not been timed against each other on an ARM CPU.)
constexpr int64_t kInt4GemvMaxRowsBeforeVnniGemm = 10;
constexpr int64_t kInt4GemvMaxRowsBeforeGemm = 24;

// x [L, in], weight [out, in], bias [out] or undefined, out [L, out] (contiguous).
void linear_into(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});
// The same into a new tensor of x's dtype.
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

// a [n, k] · b [k, m] (or batched: [B, n, k] · [B, k, m]) in a's dtype; a and b
// share a dtype. For attention, where both operands are activations.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);
// The same into out ([n, m] or [B, n, m], out's dtype = a's, may be a strided view).
void matmul_into(at::Tensor& out, const at::Tensor& a, const at::Tensor& b);

// The same for either kind of weight. Int8 weights run gemv_int8 for short
// inputs (decode steps, small batches: up to kInt8GemvMaxRowsBeforeGemm rows
// where the int8 GEMM is fast, else kInt8GemvMaxRows); longer inputs run
// the int8 × int8 GEMM (kernels/int8_gemm.h) where the tier has a kernel for
// it (avx2, and avx512 with or without VNNI), and elsewhere are multiplied by ATen against
// the weight dequantized to x's dtype, a block of weight rows at a time, in
// `scratch`: grown when needed and kept by the caller for reuse, so no dense
// copy of the weights outlives the call's working set. Int4 weights the same
// way, with gemv_int4 up to kInt4GemvMaxRowsBefore(Vnni)Gemm rows of a prompt
// where the int4 GEMM is fast (x86, and aarch64 with the dot product), else
// kInt8GemvMaxRows.
// What x's rows are, where the route may differ: a prompt's tokens (of one
// sequence), or one token of each of several sequences (a batched decode
// step). The latter stay on the GEMV up to kInt8GemvMaxRows, as one sequence
// alone is, so that a sequence's result does not depend on the others in its
// step (`qvl ocr --batch N` answers as --batch 1 does).
enum class Rows { Prompt, Sequences };
void linear_into(at::Tensor& out, const at::Tensor& x, const LinearWeight& weight, const at::Tensor& bias,
                 at::Tensor& scratch, Rows rows = Rows::Prompt);

}  // namespace qvl::tensor
