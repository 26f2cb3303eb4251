// Weight-only int8: a bf16 matrix becomes int8 values with one float scale
// per group of columns (symmetric, w ≈ q · scale, q in -127..127), halving the
// bytes a decode step streams. Plus the GEMV over such a matrix.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "qvl/kernels/gemv.h"
#include "qvl/kernels/storage.h"

namespace qvl::kernels {

// Pass as group_size for one scale per row.
constexpr int64_t kGroupPerRow = 0;

// A quantized matrix, owned elsewhere (a QuantizedMatrix or a mapped cache
// file). Each row is zero-padded to padded_cols bytes, a multiple of
// group_size, which is a multiple of 64: a kernel never loads a partial chunk.
struct Int8Matrix {
  const int8_t* weights = nullptr;  // rows × padded_cols
  const float* scales = nullptr;    // rows × groups(), row-major
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t padded_cols = 0;
  int64_t group_size = 0;
  int64_t groups() const { return group_size > 0 ? padded_cols / group_size : 0; }
  size_t weight_bytes() const { return size_t(rows * padded_cols); }
  size_t scale_bytes() const { return size_t(rows * groups()) * sizeof(float); }
};

// Checks the shape fields agree with each other; throws qvl::Error naming `what`.
void validate_int8_layout(const Int8Matrix& m, const std::string& what);

// Owns the (64-byte aligned) storage of an Int8Matrix.
class QuantizedMatrix {
 public:
  // Zero-filled. group_size: a positive multiple of 64, or kGroupPerRow.
  QuantizedMatrix(int64_t rows, int64_t cols, int64_t group_size);
  const Int8Matrix& view() const { return view_; }
  int8_t* weights() { return const_cast<int8_t*>(view_.weights); }
  float* scales() { return const_cast<float*>(view_.scales); }

 private:
  struct FreeAligned {
    void operator()(void* p) const;
  };
  std::unique_ptr<uint8_t, FreeAligned> storage_;
  Int8Matrix view_;
};

// Per (row, group): scale = max|w| / 127, q = round(w / scale).
// So |w - q·scale| <= scale / 2 for every element.
QuantizedMatrix quantize_int8(const Bf16Matrix& w, int64_t group_size);
// Rows [first_row, first_row + rows) of w dequantized (q · scale) into out
// [rows, w.cols] of storage s, for the matmuls of long inputs (prefill), where
// multiplying dense blocks beats streaming the int8 weights through the GEMV
// once per 8 rows. bf16 results are rounded to nearest even from the float
// product. Rows are split across the threads as the GEMVs split theirs.
// Throws qvl::Error on rows outside w.
void dequantize_rows(const Int8Matrix& w, int64_t first_row, int64_t rows, Storage s, void* out);

// Y[n, m] = sum_k X[n, k] · dequantized W[m, k] for n < batch (1..kMaxVectors).
// x: batch rows of w.cols floats; y: batch rows of w.rows floats.
// x is quantized per group to int8 as well (scale max|x| / 127), so the dot
// products are exact integers: each x_k moves by at most its group's
// max|x| / 254. `isa`: the tier whose code runs (on the avx512 tier, the
// VNNI kernel where the CPU has AVX512-VNNI, else the avx2 one). The avx2 and
// avx512 tiers give the same bits. Throws qvl::Error on a bad batch or
// layout, or a tier this CPU cannot run.
void gemv_int8(const Int8Matrix& w, const float* x, float* y, int64_t batch = 1, Isa isa = active_isa());

}  // namespace qvl::kernels
