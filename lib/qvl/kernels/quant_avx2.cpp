// The avx2 tier's int8-weight GEMV kernel (also the avx512 tier's on CPUs
// without AVX512-VNNI). Built with AVX2+FMA+F16C (lib/CMakeLists.txt) and
// entered only when one of those tiers is active; it must not instantiate
// templates or inline functions other files also use.
//
// Lane i of a 64-byte chunk holds the exact integer sum of its bytes
// 4i..4i+3, as vpdpbusd makes it: vpmaddubsw multiplies |q| (unsigned) by
// xq with q's sign (signed) and adds byte pairs into 16 bits, which never
// saturate (|xq|, |q| <= 127, so a pair is at most 32258); vpmaddwd by ones
// adds those pairs into 32 bits. Lanes 0-7 sit in one register, 8-15 in
// another; the float accumulation per group is the VNNI kernel's, so both
// give the same bits.
#include <immintrin.h>

#include "qvl/kernels/detail.h"

namespace qvl::kernels::detail {
namespace {

constexpr int kHalfLanes = kLanes / 2;
constexpr int64_t kHalfChunk = kInt8Chunk / 2;

struct MaddubsKernel {
  // Measured (AMD EPYC family 25 model 17, 2 threads; tests/model/bench_kernels.cpp): up to batch
  // 5 the kernel waits on memory, and one row at a time (a single sequential
  // stream per thread) streams 20-50% faster than blocks of 2-4 rows; from
  // batch 6 on it waits on the integer units, and 3 rows share each x load.
  static constexpr int rows_per_block(int batch) { return batch <= 5 ? 1 : 3; }

  template <int N, int R>
  static void block(const Int8Job& job, int64_t row) {
    const int64_t groups = job.padded_cols / job.group_size;
    const int8_t* w[R];
    for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.padded_cols;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 total[R][N][2];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) total[r][n][0] = total[r][n][1] = _mm256_setzero_ps();

    for (int64_t g = 0; g < groups; ++g) {
      __m256i dot[R][N][2];
      for (int r = 0; r < R; ++r)
        for (int n = 0; n < N; ++n) dot[r][n][0] = dot[r][n][1] = _mm256_setzero_si256();
      const int64_t group_end = (g + 1) * job.group_size;
      for (int64_t k = g * job.group_size; k < group_end; k += kInt8Chunk) {
        prefetch_ahead(w, k, job.padded_cols);
        for (int half = 0; half < 2; ++half) {
          const int64_t at = k + half * kHalfChunk;
          __m256i weights[R], magnitudes[R];
          for (int r = 0; r < R; ++r) {
            weights[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + at));
            magnitudes[r] = _mm256_abs_epi8(weights[r]);
          }
          for (int n = 0; n < N; ++n) {
            const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(job.x_q + n * job.padded_cols + at));
            for (int r = 0; r < R; ++r) {
              const __m256i pairs = _mm256_maddubs_epi16(magnitudes[r], _mm256_sign_epi8(x, weights[r]));
              dot[r][n][half] = _mm256_add_epi32(dot[r][n][half], _mm256_madd_epi16(pairs, ones));
            }
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        const float w_scale = job.w_scales[(row + r) * groups + g];
        for (int n = 0; n < N; ++n) {
          const __m256 scale = _mm256_set1_ps(w_scale * job.x_scales[n * groups + g]);
          for (int half = 0; half < 2; ++half)
            total[r][n][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][n][half]), scale, total[r][n][half]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) {
        alignas(32) float lanes[kLanes];
        _mm256_store_ps(lanes, total[r][n][0]);
        _mm256_store_ps(lanes + kHalfLanes, total[r][n][1]);
        job.y[n * job.rows + row + r] = reduce_pairwise(lanes);
      }
  }
};

}  // namespace

void int8_rows_avx2(const Int8Job& job, int64_t begin, int64_t end) { run_blocks<MaddubsKernel>(job, begin, end); }

}  // namespace qvl::kernels::detail
