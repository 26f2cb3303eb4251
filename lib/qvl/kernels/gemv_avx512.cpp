// The avx512 tier's bf16 GEMV kernel (FMA, x exact in float32). Built with
// AVX-512 F+BW+VL+DQ (lib/CMakeLists.txt) and entered only when that tier is
// active; it must not instantiate templates or inline functions other files
// also use.
#include <immintrin.h>

#include "qvl/kernels/detail.h"
#include "qvl/kernels/gemv_avx512_common.h"

namespace qvl::kernels::detail {
namespace {

// A chunk of 32 bf16 weights as floats: element 2i sits in the high half of
// 32-bit lane i's low word, so shifting it up gives its float; element 2i+1
// is already the high half and needs its low word cleared.
inline __m512 even_weights(__m512i packed) { return _mm512_castsi512_ps(_mm512_slli_epi32(packed, 16)); }
inline __m512 odd_weights(__m512i packed) {
  return _mm512_castsi512_ps(_mm512_and_si512(packed, _mm512_set1_epi32(int(0xffff0000u))));
}

// One accumulator per row and vector; per chunk it adds w_even · x_even, then
// w_odd · x_odd (the order the avx2 kernel keeps too).
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

}  // namespace

void bf16_fma_rows_avx512(const Bf16Job& job, int64_t begin, int64_t end) { run_blocks<FmaKernel>(job, begin, end); }

}  // namespace qvl::kernels::detail
