// int8 × int8 → int32 matrix products for long inputs (prefill): the int8
// weights of quant.h times activations quantized per row and group on the
// fly, the scales applied in float32. The GEMV (gemv_int8) streams the weights
// once per 8 rows and waits on memory; here every weight byte loaded serves a
// block of rows, so the integer units set the pace, at twice bf16's
// multiply-adds per instruction (vpdpbusd against vdpbf16ps).
#pragma once
#include <cstdint>

#include "qvl/kernels/quant.h"
#include "qvl/kernels/quant4.h"
#include "qvl/kernels/storage.h"

namespace qvl::kernels {

// Y[m, n] = sum_k X[m, k] · dequantized W[n, k] (+ bias[n]), for m < rows.
// x: rows × w.cols values (x_storage), row-major, consecutive rows x_stride
// elements apart; y: rows × w.rows values (y_storage), y_stride apart.
// X is quantized as gemv_int8 quantizes it (per row and group of
// w.group_size: scale max|x| / 127, xq = round-half-even(x / scale)), so each
// group's dot product is an exact integer; the float accumulation over the
// groups is the same on every x86 tier. `bias` (w.rows floats, or null) is
// added to each float sum before its one rounding to y_storage (a separate
// bias add would round a bf16 Y twice and cost a pass over it). `isa`: whose code runs (the avx512
// tier's VNNI kernel on CPUs with AVX512-VNNI; the avx2-vnni tier's 256-bit
// VNNI kernel; the AVX2 kernel (vpmaddubsw) on the avx2 tier and on avx512
// without VNNI; the portable one elsewhere — correct everywhere, fast only on
// x86; all x86 kernels give the same bits). Throws qvl::Error on a bad
// layout, negative rows, strides shorter than a row, or a tier this CPU cannot run.
void gemm_int8(const Int8Matrix& w, const void* x, Storage x_storage, int64_t x_stride, int64_t rows, void* y,
               Storage y_storage, int64_t y_stride, const float* bias = nullptr, Isa isa = active_isa());

// Whether gemm_int8 on `isa` has a kernel of its own here (not the portable
// one): where the int8 GEMM beats dequantizing to bf16 (docs/PERFORMANCE.md,
// "int8 matmuls").
bool gemm_int8_is_fast(Isa isa = active_isa());
// Whether that kernel multiplies with VNNI's vpdpbusd (the avx512 tier on
// CPUs with AVX512-VNNI, the avx2-vnni tier).
bool gemm_int8_uses_vnni(Isa isa = active_isa());

// The same product for 4-bit weights (quant4.h: w = u · scale + min per group
// of 64): X quantized per row and group of 64 as above, each group's Σ u·xq
// an exact integer, and the offset's share min · x_scale · Σ xq added to the
// float sum after it (Σ u·x·scale + min·Σ x, with x as quantized). The
// levels are unpacked a panel at a time, never the whole matrix. Every tier
// runs the kernel gemm_int8 runs; the x86 tiers give the same bits
// (gemm_int4_is_fast: where that is not the portable one). Throws as
// gemm_int8 does.
void gemm_int4(const Int4Matrix& w, const void* x, Storage x_storage, int64_t x_stride, int64_t rows, void* y,
               Storage y_storage, int64_t y_stride, const float* bias = nullptr, Isa isa = active_isa());
bool gemm_int4_is_fast(Isa isa = active_isa());

}  // namespace qvl::kernels
