// AVX-512 int8-weight GEMV kernels. Like gemv_avx512.cpp, this file alone is
// built with -mavx512* flags and only entered after a run-time CPU check.
#include <immintrin.h>

#include "qvl/kernels/detail.h"

namespace qvl::kernels::detail {
namespace {

constexpr int64_t kPrefetchBytes = 1024;

constexpr int rows_per_block(int batch) { return batch <= 2 ? 4 : batch <= 4 ? 2 : 1; }

template <int N, int R>
void float_block(const Int8Job& job, int64_t row) {
  const int64_t groups = job.padded_cols / job.group_size;
  const int8_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.padded_cols;
  __m512 total[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) total[r][n] = _mm512_setzero_ps();

  for (int64_t g = 0; g < groups; ++g) {
    __m512 group[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) group[r][n] = _mm512_setzero_ps();
    const int64_t group_end = (g + 1) * job.group_size;
    for (int64_t chunk = g * job.group_size; chunk < group_end; chunk += kInt8Chunk) {
      for (int r = 0; r < R; ++r)
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + chunk) + kPrefetchBytes, _MM_HINT_T0);
      for (int64_t k = chunk; k < chunk + kInt8Chunk; k += kLanes) {
        __m512 x[N];
        for (int n = 0; n < N; ++n) x[n] = _mm512_loadu_ps(job.x + n * job.padded_cols + k);
        for (int r = 0; r < R; ++r) {
          const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r] + k));
          const __m512 weights = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
          for (int n = 0; n < N; ++n) group[r][n] = _mm512_fmadd_ps(weights, x[n], group[r][n]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 scale = _mm512_set1_ps(job.w_scales[(row + r) * groups + g]);
      for (int n = 0; n < N; ++n) total[r][n] = _mm512_fmadd_ps(group[r][n], scale, total[r][n]);
    }
  }

  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, total[r][n]);
      job.y[n * job.rows + row + r] = reduce_lanes(lanes);
    }
}

template <int N, int R>
void vnni_block(const Int8Job& job, int64_t row) {
  const int64_t groups = job.padded_cols / job.group_size;
  const int64_t chunks_per_row = job.padded_cols / kInt8Chunk;
  const int8_t* w[R];
  for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.padded_cols;
  const __m512i zero = _mm512_setzero_si512();
  __m512 total[R][N];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) total[r][n] = _mm512_setzero_ps();

  for (int64_t g = 0; g < groups; ++g) {
    __m512i group[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) group[r][n] = zero;
    const int64_t group_end = (g + 1) * job.group_size;
    for (int64_t k = g * job.group_size; k < group_end; k += kInt8Chunk) {
      __m512i x_abs[N];
      __mmask64 x_negative[N];
      for (int n = 0; n < N; ++n) {
        x_abs[n] = _mm512_loadu_si512(job.x_abs + n * job.padded_cols + k);
        x_negative[n] = _cvtu64_mask64(job.x_negative[n * chunks_per_row + k / kInt8Chunk]);
      }
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + k) + kPrefetchBytes, _MM_HINT_T0);
        const __m512i weights = _mm512_loadu_si512(w[r] + k);
        for (int n = 0; n < N; ++n) {
          // |x| is the unsigned operand, so the weight carries x's sign.
          const __m512i signed_weights = _mm512_mask_sub_epi8(weights, x_negative[n], zero, weights);
          group[r][n] = _mm512_dpbusd_epi32(group[r][n], x_abs[n], signed_weights);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float w_scale = job.w_scales[(row + r) * groups + g];
      for (int n = 0; n < N; ++n) {
        const __m512 scale = _mm512_set1_ps(w_scale * job.x_scales[n * groups + g]);
        total[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(group[r][n]), scale, total[r][n]);
      }
    }
  }

  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, total[r][n]);
      job.y[n * job.rows + row + r] = reduce_lanes(lanes);
    }
}

template <int N, int R> struct FloatBlock { static void run(const Int8Job& j, int64_t row) { float_block<N, R>(j, row); } };
template <int N, int R> struct VnniBlock { static void run(const Int8Job& j, int64_t row) { vnni_block<N, R>(j, row); } };

template <int N, template <int, int> class Block>
void rows_for_batch(const Int8Job& job, int64_t begin, int64_t end) {
  constexpr int R = rows_per_block(N);
  int64_t row = begin;
  for (; row + R <= end; row += R) Block<N, R>::run(job, row);
  for (; row < end; ++row) Block<N, 1>::run(job, row);
}

template <template <int, int> class Block>
void rows_any_batch(const Int8Job& job, int64_t begin, int64_t end) {
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

void int8_float_rows_avx512(const Int8Job& job, int64_t begin, int64_t end) { rows_any_batch<FloatBlock>(job, begin, end); }
void int8_vnni_rows_avx512(const Int8Job& job, int64_t begin, int64_t end) { rows_any_batch<VnniBlock>(job, begin, end); }

}  // namespace qvl::kernels::detail
