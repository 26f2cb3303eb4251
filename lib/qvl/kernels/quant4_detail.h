// Internal to lib/qvl/kernels: the 4-bit GEMV's job and its per-tier row
// kernels (quant4.cpp: portable; quant4_avx2.cpp; quant4_avx512_vnni.cpp).
#pragma once
#include <cstdint>

#include "qvl/kernels/detail.h"  // run_blocks, prefetch_ahead, kLanes, reduce_pairwise
#include "qvl/kernels/quant4.h"

namespace qvl::kernels::detail {

// One row range of a 4-bit GEMV (layout: quant4.h). x is quantized per
// 64-column group to int8: x ≈ xq · x_scale. For a row with levels u, scale
// s and offset m per group, the group contributes
//   s · x_scale · sum u·xq  +  m · (x_scale · sum xq)
// where sum u·xq is an exact integer (u 0..15, |xq| <= 127) and the second
// factor of the offset term is per vector, not per row ("x_sums").
struct Int4Job {
  const uint8_t* w;        // levels, rows × row_bytes
  const uint16_t* params;  // rows × groups × {scale, min}, float16
  int64_t rows, padded_cols, row_bytes, groups;
  int64_t batch;
  const int8_t* x_q;       // batch × padded_cols, column order, zero past cols
  const float* x_scales;   // batch × groups
  const float* x_sums;     // batch × groups: x_scale · sum of the group's xq
  // For the avx512 kernel, which reads 128 columns (two groups) per 64-byte
  // load: per 128 columns, xq of columns [0, 32) [64, 96) [32, 64) [96, 128)
  // (what the low and the high nibbles of the load hold), and per 128
  // columns 16 floats of x_scale (lanes 0-7: the first group's, 8-15: the
  // second's) and 16 of x_sums / 8 (each group's sum spread over its 8 lanes;
  // dividing by 8 is exact). Filled only for that kernel.
  const int8_t* x_swizzled;    // batch × padded_cols
  const float* x_scale_lanes;  // batch × (padded_cols / 128) × 16
  const float* x_sum_lanes;    // batch × (padded_cols / 128) × 16
  float* y;                    // batch rows of `rows` floats
};
static inline Int4Job vectors_of(Int4Job job, int64_t first, int64_t n) {
  job.x_q += first * job.padded_cols;
  job.x_scales += first * job.groups;
  job.x_sums += first * job.groups;
  if (job.x_swizzled) {
    const int64_t lanes = job.padded_cols / kInt4Chunk * kLanes;
    job.x_swizzled += first * job.padded_cols;
    job.x_scale_lanes += first * lanes;
    job.x_sum_lanes += first * lanes;
  }
  job.y += first * job.rows;
  job.batch = n;
  return job;
}
using Int4RowsKernel = void (*)(const Int4Job& job, int64_t row_begin, int64_t row_end);
void int4_rows_generic(const Int4Job& job, int64_t row_begin, int64_t row_end);
// Entered only when their tier is active (the files exist only on x86).
void int4_rows_avx2(const Int4Job& job, int64_t row_begin, int64_t row_end);
void int4_rows_avx512_vnni(const Int4Job& job, int64_t row_begin, int64_t row_end);

}  // namespace qvl::kernels::detail
