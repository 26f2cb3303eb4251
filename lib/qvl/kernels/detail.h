// Internal to lib/qvl/kernels: the per-ISA row kernels and the data layouts
// they share with the portable code.
//
// The portable kernels copy the AVX-512 kernels' arithmetic lane by lane (16
// float lanes, the same FMA order, the same final reduction), which is why
// both give the same bits and the tests can demand equality.
#pragma once
#include <cstdint>
#include <functional>

namespace qvl::kernels::detail {

constexpr int kLanes = 16;          // floats in a 512-bit register
constexpr int64_t kBf16Chunk = 32;  // bf16 weights per 64-byte load
constexpr int64_t kInt8Chunk = 64;  // int8 weights per 64-byte load

// `static`: the AVX-512 files include this too, and an inline function
// compiled with AVX-512 must never be the copy the linker keeps for others.
static inline int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Sum of 16 lanes in a fixed pairwise order shared by every path.
static inline float reduce_lanes(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}

// One row range of a bf16 GEMV. A 32-wide chunk of a row, read as 16 uint32,
// holds element 2i in the low half of lane i and 2i+1 in the high half, so
// x is pre-split per chunk into [16 even elements | 16 odd elements]
// ("x_split", batch rows of padded_cols floats, zero past cols).
struct Bf16Job {
  const uint16_t* w;
  int64_t rows, cols, padded_cols;
  const float* x_split;  // for the FMA kernels
  const uint16_t* x_bf16;  // for the dot-product kernel: x rounded, zero-padded
  int64_t batch;
  float* y;  // batch rows of `rows` floats
};
void bf16_fma_rows_scalar(const Bf16Job& job, int64_t row_begin, int64_t row_end);
void bf16_fma_rows_avx512(const Bf16Job& job, int64_t row_begin, int64_t row_end);
void bf16_dot_rows_avx512(const Bf16Job& job, int64_t row_begin, int64_t row_end);

// One row range of an int8 GEMV, weights quantized per group of group_size
// along a row (a multiple of 64; padded_cols is a multiple of group_size).
struct Int8Job {
  const int8_t* w;
  const float* w_scales;  // rows × groups
  int64_t rows, padded_cols, group_size;
  int64_t batch;
  // The exact-x kernels: x as floats, batch × padded_cols, zero-padded.
  const float* x;
  // The VNNI kernels: x quantized per group to int8 as magnitude and sign,
  // because vpdpbusd multiplies unsigned by signed bytes: |xq| is the unsigned
  // side and the weights take x's sign. The sign is one bit per element.
  const uint8_t* x_abs;       // batch × padded_cols
  const uint64_t* x_negative; // batch × padded_cols/64, bit j: element j of the chunk < 0
  const float* x_scales;      // batch × groups
  float* y;
};
void int8_float_rows_scalar(const Int8Job& job, int64_t row_begin, int64_t row_end);
void int8_float_rows_avx512(const Int8Job& job, int64_t row_begin, int64_t row_end);
void int8_vnni_rows_scalar(const Int8Job& job, int64_t row_begin, int64_t row_end);
void int8_vnni_rows_avx512(const Int8Job& job, int64_t row_begin, int64_t row_end);

// Runs fn(row_begin, row_end) over [0, rows) on ATen's pool, in pieces of at
// least ~64 KiB of weights so small matrices stay on one thread.
void for_row_ranges(int64_t rows, int64_t bytes_per_row,
                    const std::function<void(int64_t, int64_t)>& fn);

}  // namespace qvl::kernels::detail
