// Weight-only 4-bit: a bf16 matrix becomes unsigned 4-bit levels with one
// scale and one offset per group of 64 columns, w ≈ u · scale + min with u in
// 0..15, both in float16. Plus the GEMV over such a matrix and the
// dequantization prefill uses. Decoding streams every weight once per token,
// so 4.5 bits per weight instead of int8's 8.25 is what makes it faster.
//
// Why this format (docs/PERFORMANCE.md, "int4 weights", has the table):
// measured on 1 Mi Gaussian and Student-t(4) weights (real checkpoints have
// heavy tails), relative RMS error of the dequantized weights:
//   group 32 symmetric (4.50 bits)  0.082 / 0.112
//   group 64 with offset (4.50 bits) 0.086 / 0.113   <- this one
//   group 64 symmetric (4.25 bits)  0.090 / 0.134
//   group 128 with offset (4.25 bits) 0.094 / 0.137
// Group 64 with an offset is as accurate as group 32 symmetric for the same
// bytes, with half the groups: each group costs the kernels a conversion and
// a multiply-add per row, which is what limits a batched GEMV. The offset
// costs the kernels nothing extra: sum (u·s + m)·x = s·sum u·x + m·sum x, and
// sum x is computed once per vector, not per row. Levels are unsigned so they
// are the unsigned operand of vpmaddubsw / vpdpbusd as they are.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "qvl/kernels/gemv.h"
#include "qvl/kernels/storage.h"

namespace qvl::kernels {

// Columns sharing one scale and one offset.
constexpr int64_t kInt4GroupSize = 64;
// Rows are padded to whole chunks of this many columns (64 bytes of levels).
constexpr int64_t kInt4Chunk = 128;

// A 4-bit matrix, owned elsewhere (a QuantizedInt4Matrix or a mapped cache).
//
// Levels: each row is padded_cols / 2 bytes. Within every 64-column group,
// byte j (0..31) of the group's 32 bytes holds column j in its low nibble and
// column j + 32 in its high nibble: one 256-bit load, masked and shifted,
// gives the group's first and second 32 columns as bytes in column order
// (the avx2 kernel), and a 512-bit load two groups (the avx512 kernel).
// Padding columns are level 0 in a group whose scale and offset are 0.
//
// Params: per row, per group, {scale, min} as float16 bits.
struct Int4Matrix {
  const uint8_t* levels = nullptr;   // rows × padded_cols / 2
  const uint16_t* params = nullptr;  // rows × groups() × 2
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t padded_cols = 0;
  int64_t group_size = kInt4GroupSize;
  int64_t groups() const { return padded_cols / kInt4GroupSize; }
  int64_t row_bytes() const { return padded_cols / 2; }
  size_t level_bytes() const { return size_t(rows * row_bytes()); }
  size_t param_bytes() const { return size_t(rows * groups() * 2) * sizeof(uint16_t); }
};

// Checks the shape fields agree with each other; throws qvl::Error naming `what`.
void validate_int4_layout(const Int4Matrix& m, const std::string& what);

// Owns the (64-byte aligned) storage of an Int4Matrix.
class QuantizedInt4Matrix {
 public:
  QuantizedInt4Matrix(int64_t rows, int64_t cols);  // zero-filled
  const Int4Matrix& view() const { return view_; }
  uint8_t* levels() { return const_cast<uint8_t*>(view_.levels); }
  uint16_t* params() { return const_cast<uint16_t*>(view_.params); }

 private:
  struct FreeAligned {
    void operator()(void* p) const;
  };
  std::unique_ptr<uint8_t, FreeAligned> storage_;
  Int4Matrix view_;
};

// float16 <-> float32 (round to nearest even; overflow saturates to ±65504,
// as a scale never needs infinity).
uint16_t float_to_f16(float value);
float f16_to_float(uint16_t bits);

// Per (row, group): the range [lo, hi] of the group's weights, shrunk towards
// zero by the factor (1, 0.99, ..., 0.81) with the smallest squared error
// (clipping the extremes of a heavy-tailed group pays), then scale =
// (hi - lo) / 15 and min = lo rounded to float16, u = round((w - min) / scale)
// clamped to 0..15 with the rounded scale and min. So every weight inside the
// chosen range is within scale / 2 (plus float16 rounding) of u · scale + min.
QuantizedInt4Matrix quantize_int4(const Bf16Matrix& w);

// Column k's level of a row (the nibble layout above).
inline uint8_t int4_level(const Int4Matrix& m, int64_t row, int64_t k) {
  const int64_t group = k / kInt4GroupSize, j = k % kInt4GroupSize;
  const uint8_t byte = m.levels[row * m.row_bytes() + group * (kInt4GroupSize / 2) + j % 32];
  return j < 32 ? byte & 0x0f : byte >> 4;
}

// Rows [first_row, first_row + rows) dequantized (u · scale + min, in float32)
// into out [rows, w.cols] of storage s, for prefill's matmuls; bf16 results
// are rounded to nearest even. Throws qvl::Error on rows outside w.
void dequantize_int4_rows(const Int4Matrix& w, int64_t first_row, int64_t rows, Storage s, void* out);

// Y[n, m] = sum_k X[n, k] · dequantized W[m, k] for n < batch (1..kMaxVectors).
// x: batch rows of w.cols floats; y: batch rows of w.rows floats. x is
// quantized per 64-column group to int8 (scale max|x| / 127), so each group's
// sum u·xq is an exact integer on every tier; the tiers differ only in the
// order of the float accumulation. `isa`: the tier whose code runs (on the
// avx512 tier the VNNI kernel where the CPU has AVX512-VNNI, else the avx2
// one). Throws qvl::Error on a bad batch or layout, or a tier this CPU cannot run.
void gemv_int4(const Int4Matrix& w, const float* x, float* y, int64_t batch = 1, Isa isa = active_isa());

}  // namespace qvl::kernels
