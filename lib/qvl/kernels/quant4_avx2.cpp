// The avx2 tier's 4-bit GEMV kernel (also the avx512 tier's on CPUs without
// AVX512-VNNI). Built with AVX2+FMA+F16C (lib/CMakeLists.txt) and entered only
// when one of those tiers is active; it must not instantiate templates or
// inline functions other files also use.
//
// A 64-column group is one 32-byte load: the low nibbles (and 0x0f) are
// columns 0-31 as bytes, the high nibbles (16-bit shift by 4, and 0x0f)
// columns 32-63. vpmaddubsw multiplies those unsigned levels (0..15) by the
// signed xq (-127..127) and adds neighbours into 16 bits: at most
// 2·15·127 = 3810, so the two halves' results add in 16 bits too (7620)
// before one vpmaddwd by ones widens the group's 16 pair sums to 8 int32.
// Then one float multiply-add per group by scale · x_scale; the offset term
// (min · x_scale · sum xq) goes to a scalar per row and vector.
#include <immintrin.h>

#include <cmath>

#include "qvl/kernels/quant4_detail.h"

namespace qvl::kernels::detail {
namespace {

constexpr int64_t kGroupBytes = kInt4GroupSize / 2;

// Horizontal sum of 8 floats (pairwise).
inline float sum_lanes(__m256 v) {
  const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
  return _mm_cvtss_f32(_mm_add_ss(pair, _mm_movehdup_ps(pair)));
}

struct MaddubsInt4Kernel {
  // Not tuned by measurement yet (the machine was busy): at small batches the
  // kernel waits on memory, so one row at a time; from batch 4 on two rows
  // share each x load.
  static constexpr int rows_per_block(int batch) { return batch <= 3 ? 1 : 2; }

  template <int N, int R>
  static void block(const Int4Job& job, int64_t row) {
    const uint8_t* w[R];
    const uint16_t* params[R];
    for (int r = 0; r < R; ++r) {
      w[r] = job.w + (row + r) * job.row_bytes;
      params[r] = job.params + (row + r) * job.groups * 2;
    }
    const __m256i mask = _mm256_set1_epi8(0x0f);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 total[R][N];
    float offset[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) {
        total[r][n] = _mm256_setzero_ps();
        offset[r][n] = 0.0f;
      }

    for (int64_t g = 0; g < job.groups; ++g) {
      const int64_t at = g * kGroupBytes;
      prefetch_ahead(w, at, job.row_bytes);
      __m256i low[R], high[R];
      float scale[R], min[R];
      for (int r = 0; r < R; ++r) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[r] + at));
        low[r] = _mm256_and_si256(bytes, mask);
        high[r] = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask);
        scale[r] = _cvtsh_ss(params[r][2 * g]);
        min[r] = _cvtsh_ss(params[r][2 * g + 1]);
      }
      for (int n = 0; n < N; ++n) {
        const int8_t* x = job.x_q + n * job.padded_cols + g * kInt4GroupSize;
        const __m256i x_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
        const __m256i x_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32));
        const float x_scale = job.x_scales[n * job.groups + g], x_sum = job.x_sums[n * job.groups + g];
        for (int r = 0; r < R; ++r) {
          const __m256i pairs =
              _mm256_add_epi16(_mm256_maddubs_epi16(low[r], x_low), _mm256_maddubs_epi16(high[r], x_high));
          const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          total[r][n] = _mm256_fmadd_ps(dot, _mm256_set1_ps(scale[r] * x_scale), total[r][n]);
          // Explicitly fused, so that no block shape contracts it differently.
          offset[r][n] = std::fma(min[r], x_sum, offset[r][n]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) job.y[n * job.rows + row + r] = sum_lanes(total[r][n]) + offset[r][n];
  }
};

}  // namespace

void int4_rows_avx2(const Int4Job& job, int64_t begin, int64_t end) { run_blocks<MaddubsInt4Kernel>(job, begin, end); }

}  // namespace qvl::kernels::detail
