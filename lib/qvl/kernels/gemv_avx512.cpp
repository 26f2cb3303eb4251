// AVX-512 bf16 GEMV kernels. This file alone is compiled with -mavx512*
// (lib/CMakeLists.txt) and is only entered after a run-time CPU check; it
// must not instantiate templates or inline functions other files also use.
#include <immintrin.h>

#include "qvl/kernels/detail.h"

namespace qvl::kernels::detail {
namespace {

// A chunk of 32 bf16 weights as floats: element 2i sits in the high half of
// 32-bit lane i's low word, so shifting it up gives its float; element 2i+1
// is already the high half and needs its low word cleared.
inline __m512 even_weights(__m512i packed) { return _mm512_castsi512_ps(_mm512_slli_epi32(packed, 16)); }
inline __m512 odd_weights(__m512i packed) {
  return _mm512_castsi512_ps(_mm512_and_si512(packed, _mm512_set1_epi32(int(0xffff0000u))));
}

// Loads chunk k of each of R rows (zero past cols), prefetching ahead.
template <int R>
inline void load_chunk(const uint16_t* const (&w)[R], int64_t k, int64_t cols, __m512i (&packed)[R]) {
  if (k + kBf16Chunk <= cols) {
    prefetch_ahead(w, k, cols);
    for (int r = 0; r < R; ++r) packed[r] = _mm512_loadu_si512(w[r] + k);
  } else {
    const __mmask32 valid = __mmask32((uint64_t(1) << (cols - k)) - 1);
    for (int r = 0; r < R; ++r) packed[r] = _mm512_maskz_loadu_epi16(valid, w[r] + k);
  }
}

template <int R, int N>
inline void store_sums(const Bf16Job& job, int64_t row, __m512 (&acc)[R][N]) {
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, acc[r][n]);
      job.y[n * job.rows + row + r] = reduce_lanes(lanes);
    }
}

// Rows per block, measured (tests/model/bench_kernels.cpp): more rows share
// each x load and keep more streams in flight, until the R·N accumulators,
// the weights and the x chunk no longer fit in 32 registers.
// (Batch 1 measured the same with 8 rows as with 4.)
constexpr int bf16_rows_per_block(int batch) { return batch <= 4 ? 4 : 3; }

// x exact in float32. One accumulator per row and vector; per chunk it adds
// w_even · x_even, then w_odd · x_odd (the order bf16_fma_rows_scalar keeps).
struct FmaKernel {
  static constexpr int rows_per_block(int batch) { return bf16_rows_per_block(batch); }
  template <int N, int R>
  static void block(const Bf16Job& job, int64_t row) {
    const uint16_t* w[R];
    for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.cols;
    __m512 acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
    for (int64_t k = 0; k < job.cols; k += kBf16Chunk) {
      __m512i packed[R];
      load_chunk(w, k, job.cols, packed);
      __m512 w_even[R], w_odd[R];
      for (int r = 0; r < R; ++r) w_even[r] = even_weights(packed[r]), w_odd[r] = odd_weights(packed[r]);
      for (int n = 0; n < N; ++n) {
        const float* x = job.x_split + n * job.padded_cols + k;
        const __m512 x_even = _mm512_loadu_ps(x), x_odd = _mm512_loadu_ps(x + kLanes);
        for (int r = 0; r < R; ++r) {
          acc[r][n] = _mm512_fmadd_ps(w_even[r], x_even, acc[r][n]);
          acc[r][n] = _mm512_fmadd_ps(w_odd[r], x_odd, acc[r][n]);
        }
      }
    }
    store_sums(job, row, acc);
  }
};

// x rounded to bf16: one dpbf16 per chunk does all 32 products.
struct DotKernel {
  static constexpr int rows_per_block(int batch) { return bf16_rows_per_block(batch); }
  template <int N, int R>
  static void block(const Bf16Job& job, int64_t row) {
    const uint16_t* w[R];
    for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.cols;
    __m512 acc[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();
    for (int64_t k = 0; k < job.cols; k += kBf16Chunk) {
      __m512i packed[R];
      load_chunk(w, k, job.cols, packed);
      for (int n = 0; n < N; ++n) {
        const __m512bh x = (__m512bh)_mm512_loadu_si512(job.x_bf16 + n * job.padded_cols + k);
        for (int r = 0; r < R; ++r) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)packed[r], x);
      }
    }
    store_sums(job, row, acc);
  }
};

}  // namespace

void bf16_fma_rows_avx512(const Bf16Job& job, int64_t begin, int64_t end) { run_blocks<FmaKernel>(job, begin, end); }
void bf16_dot_rows_avx512(const Bf16Job& job, int64_t begin, int64_t end) { run_blocks<DotKernel>(job, begin, end); }

}  // namespace qvl::kernels::detail
