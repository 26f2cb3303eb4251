// Internal to lib/qvl/kernels: the per-tier row kernels of the GEMVs and the
// data layouts they share.
//
// The avx2 and avx512 kernels do the same arithmetic lane by lane (16 float
// lanes: one 512-bit register, or two 256-bit ones; the same FMA order; the
// same final reduction), which is why they give the same bits and the tests
// can demand equality. The portable kernels keep the layout but multiply and
// add separately where the baseline ISA has no FMA.
#pragma once
#include <algorithm>
#include <cstdint>

#include "qvl/kernels/gemv.h"
#include "qvl/kernels/simd_portable.h"  // kLanes, reduce_pairwise

namespace qvl::kernels::detail {

using simd_portable::kLanes;        // floats in a 512-bit register
using simd_portable::reduce_pairwise;  // the order every tier sums its lanes in
constexpr int64_t kBf16Chunk = 32;  // bf16 weights per 64-byte load
constexpr int64_t kInt8Chunk = 64;  // int8 weights per 64-byte load

// `static`: the per-tier files include this too, and an inline function
// compiled with AVX-512 must never be the copy the linker keeps for others.
static inline int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

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
// The job of vectors [first, first + n) alone.
static inline Bf16Job vectors_of(Bf16Job job, int64_t first, int64_t n) {
  if (job.x_split) job.x_split += first * job.padded_cols;
  if (job.x_bf16) job.x_bf16 += first * job.padded_cols;
  job.y += first * job.rows;
  job.batch = n;
  return job;
}
using Bf16RowsKernel = void (*)(const Bf16Job& job, int64_t row_begin, int64_t row_end);
void bf16_fma_rows_generic(const Bf16Job& job, int64_t row_begin, int64_t row_end);
// Entered only when their tier is active (the files exist only on x86).
void bf16_fma_rows_avx2(const Bf16Job& job, int64_t row_begin, int64_t row_end);
void bf16_fma_rows_avx512(const Bf16Job& job, int64_t row_begin, int64_t row_end);
void bf16_dot_rows_avx512_bf16(const Bf16Job& job, int64_t row_begin, int64_t row_end);

// One row range of an int8 GEMV, weights quantized per group of group_size
// along a row (a multiple of 64; padded_cols is a multiple of group_size).
// x is quantized per group to int8 too (xq in -127..127, x ≈ xq · x_scale),
// so each group's dot product sum xq·q is an exact integer, whichever
// instructions sum it; only the float accumulation of the groups, lane by
// lane, has to follow one order for every tier to give the same bits.
// Lane i of a 64-byte chunk sums its bytes 4i..4i+3 (as vpdpbusd does).
struct Int8Job {
  const int8_t* w;
  const float* w_scales;  // rows × groups
  int64_t rows, padded_cols, group_size;
  int64_t batch;
  const int8_t* x_q;  // batch × padded_cols, zero past cols
  // The VNNI kernel's x: xq + 128 as an unsigned byte, because vpdpbusd
  // multiplies unsigned by signed bytes. Then sum (xq+128)·q = sum xq·q +
  // 128·sum q, and the kernel subtracts 128·sum q, summing q with one more
  // vpdpbusd (by 1). Filled only for that kernel.
  const uint8_t* x_biased;  // batch × padded_cols, 128 past cols
  const float* x_scales;    // batch × groups
  float* y;
};
static inline Int8Job vectors_of(Int8Job job, int64_t first, int64_t n) {
  job.x_q += first * job.padded_cols;
  if (job.x_biased) job.x_biased += first * job.padded_cols;
  job.x_scales += first * (job.padded_cols / job.group_size);
  job.y += first * job.rows;
  job.batch = n;
  return job;
}
using Int8RowsKernel = void (*)(const Int8Job& job, int64_t row_begin, int64_t row_end);
void int8_rows_generic(const Int8Job& job, int64_t row_begin, int64_t row_end);
// Entered only when their tier is active (the files exist only on x86).
void int8_rows_avx2(const Int8Job& job, int64_t row_begin, int64_t row_end);
void int8_rows_avx512_vnni(const Int8Job& job, int64_t row_begin, int64_t row_end);

// In a block of R rows each row is its own memory stream. Hardware
// prefetchers stop at page ends, and a 2048-wide bf16 row is one 4 KiB page,
// so every row would start cold: the kernels prefetch each stream
// kPrefetchBytes ahead, and near its row's end the same distance into the row
// it reads next, R rows further on (measured with R = 4: +15-30% at batch 1;
// past the matrix end a prefetch is harmless). One row at a time (R = 1) is
// one sequential stream, prefetched the same way at every chunk. Issuing
// only the prefetches that reach into the next page had been 10-15% faster
// at one thread on an AMD EPYC family 25 model 17 (Zen 4; within the noise
// at two), but on a family 26 model 2 (Zen 5), whose own prefetcher falls
// behind, every chunk's prefetch made 2-thread decode steps faster: bf16
// dpbf16 kernel +65%, bf16 avx2 +15%, int8 +10-15%, int4 level
// (qvl_bench_kernels 2 "batch 1, 2 threads", alternated; docs/PERFORMANCE.md).
// `cols`: elements per row.
constexpr int64_t kPrefetchBytes = 1024;
template <int R, class T>
static inline void prefetch_ahead(const T* const (&w)[R], int64_t k, int64_t cols) {
  const int64_t ahead = kPrefetchBytes / int64_t(sizeof(T));
  const int64_t target = k + ahead < cols ? k + ahead : k + ahead + (R - 1) * cols;
  for (int r = 0; r < R; ++r) __builtin_prefetch(w[r] + target, 0, 3);
}

// Runs Kernel::block<N, R>(job, row) over rows [begin, end): blocks of
// R = Kernel::rows_per_block(N) rows, then single rows, with the batch N =
// job.batch a template argument so the loops over vectors and rows unroll.
// Each file instantiates it with a Kernel of its own in an anonymous
// namespace, so no instantiation compiled for one tier is shared with another.
template <class Kernel, int N, class Job>
void run_blocks_for_batch(const Job& job, int64_t begin, int64_t end) {
  constexpr int R = Kernel::rows_per_block(N);
  int64_t row = begin;
  for (; row + R <= end; row += R) Kernel::template block<N, R>(job, row);
  for (; row < end; ++row) Kernel::template block<N, 1>(job, row);
}
template <class Kernel, class Job>
void run_blocks(const Job& job, int64_t begin, int64_t end) {
  static_assert(kMaxBatch == 8, "one case per batch");
  switch (job.batch) {
    case 1: return run_blocks_for_batch<Kernel, 1>(job, begin, end);
    case 2: return run_blocks_for_batch<Kernel, 2>(job, begin, end);
    case 3: return run_blocks_for_batch<Kernel, 3>(job, begin, end);
    case 4: return run_blocks_for_batch<Kernel, 4>(job, begin, end);
    case 5: return run_blocks_for_batch<Kernel, 5>(job, begin, end);
    case 6: return run_blocks_for_batch<Kernel, 6>(job, begin, end);
    case 7: return run_blocks_for_batch<Kernel, 7>(job, begin, end);
    case 8: return run_blocks_for_batch<Kernel, 8>(job, begin, end);
  }
}

// Rows [begin, end) of a job of up to kMaxVectors vectors (gemv.h). Beyond
// kMaxBatch the vectors go in groups of nearly equal size (15 = 7 + 8, 12 =
// 6 + 6), each group over one tile of rows before the next tile: the first
// group reads the tile from memory, the others from the cache. A tile is a
// multiple of 12 rows (every row block size divides it) and at most
// kGroupTileBytes of weights, well inside a core's L2 (256 KB on older cores
// up to 1-2 MB). A vector's result is the same in any group (run_blocks).
constexpr int64_t kGroupTileBytes = int64_t(96) << 10;
template <class Job, class RowsKernel>
static void run_vector_groups(RowsKernel rows_kernel, const Job& job, int64_t begin, int64_t end, int64_t row_bytes) {
  if (job.batch <= kMaxBatch) return rows_kernel(job, begin, end);
  const int64_t groups = (job.batch + kMaxBatch - 1) / kMaxBatch;
  const int64_t tile = std::max<int64_t>(12, kGroupTileBytes / std::max<int64_t>(row_bytes, 1) / 12 * 12);
  for (int64_t first_row = begin; first_row < end; first_row += tile) {
    const int64_t last_row = std::min(end, first_row + tile);
    for (int64_t g = 0, first = 0; g < groups; ++g) {
      const int64_t n = (job.batch - first) / (groups - g);  // the later groups take the remainder
      rows_kernel(vectors_of(job, first, n), first_row, last_row);
      first += n;
    }
  }
}

}  // namespace qvl::kernels::detail
