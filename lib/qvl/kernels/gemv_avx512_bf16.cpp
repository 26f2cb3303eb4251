// The avx512 tier's bf16 dot-product GEMV kernel (vdpbf16ps), for x whose
// values are bf16 already. Built with AVX-512 + AVX512-BF16 and entered only
// when that tier is active on a CPU with AVX512-BF16.
#include <immintrin.h>

#include "qvl/kernels/detail.h"
#include "qvl/kernels/gemv_avx512_common.h"

namespace qvl::kernels::detail {
namespace {

// One dpbf16 per chunk does all 32 products of a row and vector.
//
// The masked tail is outside the loop on purpose: with load_chunk's branch in
// the loop, GCC 12 stored all R·N accumulators to the stack at every chunk
// (batch 3 and up). Without it, 2-thread steps at batch 8 took 117-136 ms
// instead of 140-163 (qvl_bench_kernels 3 "avx512-dpbf16 batch 8, 2", AMD EPYC
// Zen 5, alternated). The FMA kernel (gemv_avx512.cpp) keeps load_chunk:
// written this way it ran slower (237-265 ms against 195-217), although its
// loop then kept the accumulators in registers.
struct DotKernel {
  static constexpr int rows_per_block(int batch) { return bf16_rows_per_block(batch); }
  template <int N, int R>
  static void add_chunk(const Bf16Job& job, const __m512i (&packed)[R], int64_t k, __m512 (&acc)[R][N]) {
    for (int n = 0; n < N; ++n) {
      const __m512bh x = (__m512bh)_mm512_loadu_si512(job.x_bf16 + n * job.padded_cols + k);
      for (int r = 0; r < R; ++r) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)packed[r], x);
    }
  }
  template <int N, int R>
  static void block(const Bf16Job& job, int64_t row) {
    const uint16_t* w[R];
    for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.cols;
    __m512 acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
    const int64_t full = job.cols / kBf16Chunk * kBf16Chunk;
    for (int64_t k = 0; k < full; k += kBf16Chunk) {
      prefetch_ahead(w, k, job.cols);
      __m512i packed[R];
      for (int r = 0; r < R; ++r) packed[r] = _mm512_loadu_si512(w[r] + k);
      add_chunk<N, R>(job, packed, k, acc);
    }
    if (full < job.cols) {
      __m512i packed[R];
      load_chunk(w, full, job.cols, packed);  // masked: zero past cols
      add_chunk<N, R>(job, packed, full, acc);
    }
    store_sums(job, row, acc);
  }
};

}  // namespace

void bf16_dot_rows_avx512_bf16(const Bf16Job& job, int64_t begin, int64_t end) {
  run_blocks<DotKernel>(job, begin, end);
}

}  // namespace qvl::kernels::detail
