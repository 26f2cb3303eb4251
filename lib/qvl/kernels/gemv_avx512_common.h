// What the AVX-512 bf16 GEMV files share (gemv_avx512.cpp, and
// gemv_avx512_bf16.cpp, built with AVX512-BF16 on top). Include only from
// such files: everything here is compiled with their flags, and sits in an
// anonymous namespace so no copy is shared with code built for another tier.
#pragma once
#include <immintrin.h>

#include "qvl/kernels/detail.h"

namespace qvl::kernels::detail {
namespace {

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
      job.y[n * job.rows + row + r] = reduce_pairwise(lanes);
    }
}

// Rows per block, measured (tests/model/bench_kernels.cpp, AMD EPYC family 25
// model 17). Up to batch 2 one row at a time: the kernel waits on memory, and
// rows read one after another are one sequential stream per thread, which the
// hardware prefetcher follows across rows; blocks of 4 rows (4 streams a page
// apart) streamed ~1.7x slower on one core (on a Zen 5, with every chunk
// prefetched (detail.h), both decode alike). Beyond, more rows share each x
// load, until the R·N accumulators, the weights and the x chunk no longer fit
// in 32 registers. The summation order of a row does not depend on R, so a
// vector's result is the same in any batch.
constexpr int bf16_rows_per_block(int batch) { return batch <= 2 ? 1 : batch <= 4 ? 4 : 3; }

}  // namespace
}  // namespace qvl::kernels::detail
