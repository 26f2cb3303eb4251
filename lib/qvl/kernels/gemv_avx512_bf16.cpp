// The avx512 tier's bf16 dot-product GEMV kernel (vdpbf16ps), for x whose
// values are bf16 already. Built with AVX-512 + AVX512-BF16 and entered only
// when that tier is active on a CPU with AVX512-BF16.
#include <immintrin.h>

#include "qvl/kernels/detail.h"
#include "qvl/kernels/gemv_avx512_common.h"

namespace qvl::kernels::detail {
namespace {

// One dpbf16 per chunk does all 32 products of a row and vector.
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

void bf16_dot_rows_avx512_bf16(const Bf16Job& job, int64_t begin, int64_t end) {
  run_blocks<DotKernel>(job, begin, end);
}

}  // namespace qvl::kernels::detail
