// The avx512 tier's 4-bit GEMV kernel for CPUs with AVX512-VNNI. Built with
// AVX-512 + AVX512-VNNI (lib/CMakeLists.txt) and entered only when that tier
// is active on such a CPU.
//
// A 64-byte load holds two 64-column groups: its low nibbles are columns
// [0, 32) and [64, 96) of the 128, its high nibbles [32, 64) and [96, 128),
// which is the order of the job's swizzled x. vpdpbusd takes the unsigned
// levels as they are against the signed xq; lanes 0-7 then hold the first
// group's sums, lanes 8-15 the second's, so the per-group scales are applied
// as two halves of one vector, and the offsets too (x_sum_lanes spreads
// each group's sum over its 8 lanes).
#include <immintrin.h>

#include "qvl/kernels/dot_product_asm.h"
#include "qvl/kernels/quant4_detail.h"

namespace qvl::kernels::detail {
namespace {

constexpr int64_t kChunkBytes = kInt4Chunk / 2;

struct VnniInt4Kernel {
  // Up to batch 2 one row at a time (a single stream per thread streams
  // best); beyond, two rows share each x load.
  static constexpr int rows_per_block(int batch) { return batch <= 2 ? 1 : 2; }

  template <int N, int R>
  static void block(const Int4Job& job, int64_t row) {
    const uint8_t* w[R];
    const uint16_t* params[R];
    for (int r = 0; r < R; ++r) {
      w[r] = job.w + (row + r) * job.row_bytes;
      params[r] = job.params + (row + r) * job.groups * 2;
    }
    const __m512i mask = _mm512_set1_epi8(0x0f);
    // {scale0, min0, scale1, min1} -> scale0 ×8 | scale1 ×8, and the mins likewise.
    const __m512i pick_scales = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i pick_mins = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    const int64_t chunks = job.padded_cols / kInt4Chunk;
    __m512 total[R][N];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) total[r][n] = _mm512_setzero_ps();

    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t at = c * kChunkBytes;
      prefetch_ahead(w, at, job.row_bytes);
      __m512i low[R], high[R];
      __m512 scales[R], mins[R];
      for (int r = 0; r < R; ++r) {
        const __m512i bytes = _mm512_loadu_si512(w[r] + at);
        low[r] = _mm512_and_si512(bytes, mask);
        high[r] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
        const __m128 p = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(params[r] + 4 * c)));
        scales[r] = _mm512_permutexvar_ps(pick_scales, _mm512_castps128_ps512(p));
        mins[r] = _mm512_permutexvar_ps(pick_mins, _mm512_castps128_ps512(p));
      }
      for (int n = 0; n < N; ++n) {
        const int8_t* x = job.x_swizzled + n * job.padded_cols + c * kInt4Chunk;
        const __m512i x_low = _mm512_loadu_si512(x);
        const __m512i x_high = _mm512_loadu_si512(x + 64);
        const __m512 x_scale = _mm512_loadu_ps(job.x_scale_lanes + (n * chunks + c) * kLanes);
        const __m512 x_sum = _mm512_loadu_ps(job.x_sum_lanes + (n * chunks + c) * kLanes);
        for (int r = 0; r < R; ++r) {
          const __m512i dot =
              dot_asm::dpbusd512(dot_asm::dpbusd512(_mm512_setzero_si512(), low[r], x_low), high[r], x_high);
          total[r][n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(scales[r], x_scale), total[r][n]);
          total[r][n] = _mm512_fmadd_ps(mins[r], x_sum, total[r][n]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) {
        alignas(64) float lanes[kLanes];
        _mm512_store_ps(lanes, total[r][n]);
        job.y[n * job.rows + row + r] = reduce_pairwise(lanes);
      }
  }
};

}  // namespace

void int4_rows_avx512_vnni(const Int4Job& job, int64_t begin, int64_t end) {
  run_blocks<VnniInt4Kernel>(job, begin, end);
}

}  // namespace qvl::kernels::detail
