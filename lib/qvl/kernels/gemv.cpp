// bf16 GEMV: picks the tier's kernel, lays x out for it and splits rows across
// threads. The portable kernel lives here too; the others are in
// gemv_avx2.cpp, gemv_avx512.cpp and gemv_avx512_bf16.cpp, each built with
// its tier's flags.
#include "qvl/kernels/gemv.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/simd_portable.h"

namespace qvl::kernels {

using namespace detail;

float bf16_to_float(uint16_t bits) { return simd_portable::widen_bf16(bits); }
uint16_t float_to_bf16(float value) { return simd_portable::narrow_to_bf16(value); }

namespace {

// The portable kernel: the FMA kernels' lane layout in plain arrays, written
// so the compiler vectorizes every inner loop (SSE2, NEON). Multiply and add
// are separate operations here unless the target fuses them (aarch64 does).
struct GenericBf16Kernel {
  // One row at a time: its chunk is widened once for all N vectors.
  static constexpr int rows_per_block(int) { return 1; }

  template <int N>
  static void add_chunk(const Bf16Job& job, const uint16_t* chunk, int64_t k, float (&lanes)[N][kLanes]) {
    uint32_t packed[kLanes], even_bits[kLanes], odd_bits[kLanes];
    std::memcpy(packed, chunk, sizeof packed);
    for (int i = 0; i < kLanes; ++i) {
      even_bits[i] = packed[i] << 16;
      odd_bits[i] = packed[i] & 0xffff0000u;
    }
    float even[kLanes], odd[kLanes];
    std::memcpy(even, even_bits, sizeof even);
    std::memcpy(odd, odd_bits, sizeof odd);
    for (int n = 0; n < N; ++n) {
      const float* x = job.x_split + n * job.padded_cols + k;
      for (int i = 0; i < kLanes; ++i) lanes[n][i] = even[i] * x[i] + lanes[n][i];
      for (int i = 0; i < kLanes; ++i) lanes[n][i] = odd[i] * x[kLanes + i] + lanes[n][i];
    }
  }

  template <int N, int R>
  static void block(const Bf16Job& job, int64_t row) {
    static_assert(R == 1);
    const uint16_t* w = job.w + row * job.cols;
    float lanes[N][kLanes] = {};
    int64_t k = 0;
    for (; k + kBf16Chunk <= job.cols; k += kBf16Chunk) add_chunk<N>(job, w + k, k, lanes);
    if (k < job.cols) {
      uint16_t tail[kBf16Chunk] = {};  // zero weights past the row's end
      std::copy(w + k, w + job.cols, tail);
      add_chunk<N>(job, tail, k, lanes);
    }
    for (int n = 0; n < N; ++n) job.y[n * job.rows + row] = reduce_pairwise(lanes[n]);
  }
};

// Per calling thread, so concurrent GEMVs from different threads do not share.
thread_local std::vector<float> x_split_buffer;
thread_local std::vector<uint16_t> x_bf16_buffer;

void split_even_odd(const float* x, int64_t cols, int64_t padded_cols, float* out) {
  std::fill(out, out + padded_cols, 0.0f);
  for (int64_t k = 0; k < cols; ++k) {
    const int64_t chunk = k / kBf16Chunk * kBf16Chunk, within = k - chunk;
    out[chunk + (within & 1) * kLanes + within / 2] = x[k];
  }
}

// Whether gemv_bf16 runs avx512's dot-product kernel (see gemv.h).
bool uses_dot_product(Isa isa, bool x_is_bf16) {
  return QVL_X86 && x_is_bf16 && isa == Isa::Avx512 && cpu_features().avx512_bf16;
}

Bf16RowsKernel kernel_for(Isa isa, bool dot_product) {
#if QVL_X86
  if (dot_product) return bf16_dot_rows_avx512_bf16;
  if (isa == Isa::Avx512) return bf16_fma_rows_avx512;
  if (runs_avx2_code(isa)) return bf16_fma_rows_avx2;
#endif
  (void)isa, (void)dot_product;
  return bf16_fma_rows_generic;
}

}  // namespace

namespace detail {
void bf16_fma_rows_generic(const Bf16Job& job, int64_t begin, int64_t end) {
  run_blocks<GenericBf16Kernel>(job, begin, end);
}
}  // namespace detail

void gemv_bf16(const Bf16Matrix& w, const float* x, float* y, int64_t batch, Isa isa, bool x_is_bf16) {
  if (batch < 1 || batch > kMaxVectors)
    throw Error(fmt::format("gemv_bf16: batch {} is outside 1..{}", batch, kMaxVectors));
  if (w.rows < 0 || w.cols < 0 || (w.data == nullptr && w.rows * w.cols > 0))
    throw Error(fmt::format("gemv_bf16: bad matrix {}x{}", w.rows, w.cols));
  require_isa(isa, "gemv_bf16");
  if (w.rows == 0) return;

  Bf16Job job{};
  job.w = w.data;
  job.rows = w.rows;
  job.cols = w.cols;
  job.padded_cols = round_up(w.cols, kBf16Chunk);
  job.batch = batch;
  job.y = y;
  const bool dot_product = uses_dot_product(isa, x_is_bf16);
  if (dot_product) {
    x_bf16_buffer.assign(size_t(batch * job.padded_cols), 0);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t k = 0; k < w.cols; ++k)
        x_bf16_buffer[size_t(n * job.padded_cols + k)] = float_to_bf16(x[n * w.cols + k]);
    job.x_bf16 = x_bf16_buffer.data();
  } else {
    x_split_buffer.resize(size_t(batch * job.padded_cols));
    for (int64_t n = 0; n < batch; ++n)
      split_even_odd(x + n * w.cols, w.cols, job.padded_cols, x_split_buffer.data() + n * job.padded_cols);
    job.x_split = x_split_buffer.data();
  }
  const Bf16RowsKernel rows_kernel = kernel_for(isa, dot_product);
  share_row_ranges(w.rows, w.cols * 2, [&](int64_t begin, int64_t end) {
    run_vector_groups(rows_kernel, job, begin, end, w.cols * 2);
  });
}

}  // namespace qvl::kernels
