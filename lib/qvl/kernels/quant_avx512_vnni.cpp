// The avx512 tier's int8-weight GEMV kernel for CPUs with AVX512-VNNI. Built
// with AVX-512 + AVX512-VNNI (lib/CMakeLists.txt) and entered only when that
// tier is active on such a CPU.
#include <immintrin.h>

#include "qvl/kernels/detail.h"
#include "qvl/kernels/dot_product_asm.h"

namespace qvl::kernels::detail {
namespace {

template <int R, int N>
inline void store_sums(const Int8Job& job, int64_t row, __m512 (&total)[R][N]) {
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < N; ++n) {
      alignas(64) float lanes[kLanes];
      _mm512_store_ps(lanes, total[r][n]);
      job.y[n * job.rows + row + r] = reduce_pairwise(lanes);
    }
}

// x as biased bytes (see Int8Job): per group, integer dot products by
// vpdpbusd, the 128·sum q correction, then one FMA by the two scales.
struct VnniKernel {
  // Up to batch 2 one row at a time: the kernel waits on memory, and a
  // single sequential stream per thread streams 25-40% faster than blocks of
  // 4 rows (measured, AMD EPYC family 25 model 17). Beyond, the largest R whose 2·R·N
  // accumulators, R weight sums, R weights and x fit in 32 registers
  // (measured: spilling costs more than fewer rows).
  static constexpr int rows_per_block(int batch) {
    if (batch <= 2) return 1;
    for (int rows = 4; rows > 1; --rows)
      if (2 * rows * batch + 2 * rows + 1 <= 31) return rows;
    return 1;
  }
  template <int N, int R>
  static void block(const Int8Job& job, int64_t row) {
    const int64_t groups = job.padded_cols / job.group_size;
    const int8_t* w[R];
    for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.padded_cols;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 total[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) total[r][n] = _mm512_setzero_ps();

    for (int64_t g = 0; g < groups; ++g) {
      __m512i dot[R][N], weight_sum[R];
      for (int r = 0; r < R; ++r) {
        weight_sum[r] = _mm512_setzero_si512();
        for (int n = 0; n < N; ++n) dot[r][n] = _mm512_setzero_si512();
      }
      const int64_t group_end = (g + 1) * job.group_size;
      for (int64_t k = g * job.group_size; k < group_end; k += kInt8Chunk) {
        __m512i weights[R];
        prefetch_ahead(w, k, job.padded_cols);
        for (int r = 0; r < R; ++r) {
          weights[r] = _mm512_loadu_si512(w[r] + k);
          weight_sum[r] = dot_asm::dpbusd512(weight_sum[r], ones, weights[r]);
        }
        for (int n = 0; n < N; ++n) {
          const __m512i x = _mm512_loadu_si512(job.x_biased + n * job.padded_cols + k);
          for (int r = 0; r < R; ++r) dot[r][n] = dot_asm::dpbusd512(dot[r][n], x, weights[r]);
        }
      }
      for (int r = 0; r < R; ++r) {
        // Integer arithmetic modulo 2^32: exact whenever sum xq·q fits in int32.
        const __m512i bias = _mm512_slli_epi32(weight_sum[r], 7);
        const float w_scale = job.w_scales[(row + r) * groups + g];
        for (int n = 0; n < N; ++n) {
          const __m512 scale = _mm512_set1_ps(w_scale * job.x_scales[n * groups + g]);
          const __m512 exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(dot[r][n], bias));
          total[r][n] = _mm512_fmadd_ps(exact, scale, total[r][n]);
        }
      }
    }
    store_sums(job, row, total);
  }
};

}  // namespace

void int8_rows_avx512_vnni(const Int8Job& job, int64_t begin, int64_t end) { run_blocks<VnniKernel>(job, begin, end); }

}  // namespace qvl::kernels::detail
