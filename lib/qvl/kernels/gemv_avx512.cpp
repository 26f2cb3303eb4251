// AVX-512 bf16 GEMV kernels. This file alone is compiled with -mavx512*
// (lib/CMakeLists.txt) and is only entered after a run-time CPU check; it
// must not instantiate templates or inline functions other files also use.
#include <immintrin.h>

#include "qvl/kernels/detail.h"

namespace qvl::kernels::detail {
namespace {

// How far ahead of the current chunk each row stream is prefetched.
constexpr int64_t kPrefetchBytes = 1024;

// Rows handled together: they share each load of x. Chosen per batch so the
// accumulators (2 per row and vector) fit in the 32 zmm registers.
constexpr int rows_per_block(int batch) { return batch <= 2 ? 4 : batch <= 4 ? 2 : 1; }

template <int N, int R>
void fma_block(const Bf16Job& job, int64_t row) {
  const uint16_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.cols;
  const __m512i high_half = _mm512_set1_epi32(int(0xffff0000u));
  __m512 even[R][N], odd[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) even[r][n] = odd[r][n] = _mm512_setzero_ps();

  auto accumulate = [&](int64_t k, __m512i (&packed)[R]) {
    __m512 x_even[N], x_odd[N];
    for (int n = 0; n < N; ++n) {
      x_even[n] = _mm512_loadu_ps(job.x_split + n * job.padded_cols + k);
      x_odd[n] = _mm512_loadu_ps(job.x_split + n * job.padded_cols + k + kLanes);
    }
    for (int r = 0; r < R; ++r) {
      const __m512 w_even = _mm512_castsi512_ps(_mm512_slli_epi32(packed[r], 16));
      const __m512 w_odd = _mm512_castsi512_ps(_mm512_and_si512(packed[r], high_half));
      for (int n = 0; n < N; ++n) {
        even[r][n] = _mm512_fmadd_ps(w_even, x_even[n], even[r][n]);
        odd[r][n] = _mm512_fmadd_ps(w_odd, x_odd[n], odd[r][n]);
      }
    }
  };

  const int64_t full_chunks_end = job.cols / kBf16Chunk * kBf16Chunk;
  int64_t k = 0;
  for (; k < full_chunks_end; k += kBf16Chunk) {
    __m512i packed[R];
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      packed[r] = _mm512_loadu_si512(w[r] + k);
    }
    accumulate(k, packed);
  }
  if (k < job.cols) {
    const __mmask32 valid = __mmask32((uint64_t(1) << (job.cols - k)) - 1);
    __m512i packed[R];
    for (int r = 0; r < R; ++r) packed[r] = _mm512_maskz_loadu_epi16(valid, w[r] + k);
    accumulate(k, packed);
  }

  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, _mm512_add_ps(even[r][n], odd[r][n]));
      job.y[n * job.rows + row + r] = reduce_lanes(lanes);
    }
}

template <int N, int R>
void dot_block(const Bf16Job& job, int64_t row) {
  const uint16_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.cols;
  __m512 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) acc[r][n] = _mm512_setzero_ps();

  auto accumulate = [&](int64_t k, __m512i (&packed)[R]) {
    __m512i x[N];
    for (int n = 0; n < N; ++n) x[n] = _mm512_loadu_si512(job.x_bf16 + n * job.padded_cols + k);
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) acc[r][n] = _mm512_dpbf16_ps(acc[r][n], (__m512bh)packed[r], (__m512bh)x[n]);
  };

  const int64_t full_chunks_end = job.cols / kBf16Chunk * kBf16Chunk;
  int64_t k = 0;
  for (; k < full_chunks_end; k += kBf16Chunk) {
    __m512i packed[R];
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
      packed[r] = _mm512_loadu_si512(w[r] + k);
    }
    accumulate(k, packed);
  }
  if (k < job.cols) {
    const __mmask32 valid = __mmask32((uint64_t(1) << (job.cols - k)) - 1);
    __m512i packed[R];
    for (int r = 0; r < R; ++r) packed[r] = _mm512_maskz_loadu_epi16(valid, w[r] + k);
    accumulate(k, packed);
  }

  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, acc[r][n]);
      job.y[n * job.rows + row + r] = reduce_lanes(lanes);
    }
}

template <int N, template <int, int> class Block>
void rows_for_batch(const Bf16Job& job, int64_t begin, int64_t end) {
  constexpr int R = rows_per_block(N);
  int64_t row = begin;
  for (; row + R <= end; row += R) Block<N, R>::run(job, row);
  for (; row < end; ++row) Block<N, 1>::run(job, row);
}

template <int N, int R> struct FmaBlock { static void run(const Bf16Job& j, int64_t row) { fma_block<N, R>(j, row); } };
template <int N, int R> struct DotBlock { static void run(const Bf16Job& j, int64_t row) { dot_block<N, R>(j, row); } };

template <template <int, int> class Block>
void rows_any_batch(const Bf16Job& job, int64_t begin, int64_t end) {
  switch (job.batch) {
    case 1: return rows_for_batch<1, Block>(job, begin, end);
    case 2: return rows_for_batch<2, Block>(job, begin, end);
    case 3: return rows_for_batch<3, Block>(job, begin, end);
    case 4: return rows_for_batch<4, Block>(job, begin, end);
    case 5: return rows_for_batch<5, Block>(job, begin, end);
    case 6: return rows_for_batch<6, Block>(job, begin, end);
    case 7: return rows_for_batch<7, Block>(job, begin, end);
    case 8: return rows_for_batch<8, Block>(job, begin, end);
  }
}

}  // namespace

void bf16_fma_rows_avx512(const Bf16Job& job, int64_t begin, int64_t end) { rows_any_batch<FmaBlock>(job, begin, end); }
void bf16_dot_rows_avx512(const Bf16Job& job, int64_t begin, int64_t end) { rows_any_batch<DotBlock>(job, begin, end); }

}  // namespace qvl::kernels::detail
