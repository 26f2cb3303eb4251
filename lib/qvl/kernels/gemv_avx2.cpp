// The avx2 tier's bf16 GEMV kernel. Built with AVX2+FMA+F16C
// (lib/CMakeLists.txt) and entered only when that tier is active; it must not
// instantiate templates or inline functions other files also use.
//
// It does the avx512 kernel's arithmetic in 256-bit halves: float lanes 0-7
// of the 16 live in one register, lanes 8-15 in another, each fed by one
// 32-byte half of a 64-byte weight chunk, with the same FMAs in the same
// order and the same final reduce_pairwise, so both tiers give the same bits.
#include <immintrin.h>

#include <algorithm>

#include "qvl/kernels/detail.h"

namespace qvl::kernels::detail {
namespace {

constexpr int kHalfLanes = kLanes / 2;

struct FmaKernel {
  // Measured (AMD EPYC family 25 model 17; tests/model/bench_kernels.cpp).
  // Up to batch 2 one row at a time, as the avx512 kernels: one sequential
  // stream per thread, which the hardware prefetcher follows from row to row,
  // streamed ~1.5x faster on one core than 4 rows a page apart, although a
  // row's dependent FMAs then hide less of their latency. From batch 3 on,
  // 4 rows: spilling some accumulators (one L1 load and store per two FMAs)
  // beat fewer rows, and beat running each row twice, once per half of the
  // lanes, by 10-60%.
  static constexpr int rows_per_block(int batch) { return batch <= 2 ? 1 : 4; }

  // Adds one 32-element chunk (chunk[r] points at row r's) to the
  // accumulators: per half, w_even · x_even then w_odd · x_odd, as the
  // avx512 kernel does per lane.
  template <int N, int R>
  static void add_chunk(const Bf16Job& job, const uint16_t* const (&chunk)[R], int64_t k, __m256 (&acc)[R][N][2]) {
    const __m256i high_halves = _mm256_set1_epi32(int(0xffff0000u));
    for (int half = 0; half < 2; ++half) {
      __m256 w_even[R], w_odd[R];
      for (int r = 0; r < R; ++r) {
        const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk[r] + half * kLanes));
        w_even[r] = _mm256_castsi256_ps(_mm256_slli_epi32(packed, 16));
        w_odd[r] = _mm256_castsi256_ps(_mm256_and_si256(packed, high_halves));
      }
      for (int n = 0; n < N; ++n) {
        const float* x = job.x_split + n * job.padded_cols + k + half * kHalfLanes;
        const __m256 x_even = _mm256_loadu_ps(x), x_odd = _mm256_loadu_ps(x + kLanes);
        for (int r = 0; r < R; ++r) {
          acc[r][n][half] = _mm256_fmadd_ps(w_even[r], x_even, acc[r][n][half]);
          acc[r][n][half] = _mm256_fmadd_ps(w_odd[r], x_odd, acc[r][n][half]);
        }
      }
    }
  }

  template <int N, int R>
  static void block(const Bf16Job& job, int64_t row) {
    const uint16_t* w[R];
    for (int r = 0; r < R; ++r) w[r] = job.w + (row + r) * job.cols;
    __m256 acc[R][N][2];
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) acc[r][n][0] = acc[r][n][1] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + kBf16Chunk <= job.cols; k += kBf16Chunk) {
      prefetch_ahead(w, k, job.cols);
      const uint16_t* chunk[R];
      for (int r = 0; r < R; ++r) chunk[r] = w[r] + k;
      add_chunk<N, R>(job, chunk, k, acc);
    }
    if (k < job.cols) {
      // AVX2 has no 16-bit masked load: copy the row ends, zero-padded.
      alignas(32) uint16_t tails[R][kBf16Chunk] = {};
      const uint16_t* chunk[R];
      for (int r = 0; r < R; ++r) {
        std::copy(w[r] + k, w[r] + job.cols, tails[r]);
        chunk[r] = tails[r];
      }
      add_chunk<N, R>(job, chunk, k, acc);
    }
    for (int r = 0; r < R; ++r)
      for (int n = 0; n < N; ++n) {
        alignas(32) float lanes[kLanes];
        _mm256_store_ps(lanes, acc[r][n][0]);
        _mm256_store_ps(lanes + kHalfLanes, acc[r][n][1]);
        job.y[n * job.rows + row + r] = reduce_pairwise(lanes);
      }
  }
};

}  // namespace

void bf16_fma_rows_avx2(const Bf16Job& job, int64_t begin, int64_t end) { run_blocks<FmaKernel>(job, begin, end); }

}  // namespace qvl::kernels::detail
