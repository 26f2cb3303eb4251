// Matrix-vector products for decoding: y = W·x with W in bfloat16, read in
// place (usually straight from the mmapped checkpoint). Decoding one token
// reads every weight once, so these kernels are about streaming W at memory
// speed; x and y stay float32 so W·x is as exact as float32 accumulation allows.
//
// Rows are split across the threads (kernels/parallel.h: at::set_num_threads applies).
// Results do not depend on the thread count. The avx2 and avx512 tiers
// (kernels/cpu.h) give the same bits; the portable code (generic, neon) rounds
// a little differently where the CPU has no fused multiply-add.
#pragma once
#include <cstdint>

#include "qvl/kernels/cpu.h"

namespace qvl::kernels {

// The most vectors a row kernel multiplies in one pass over the weights
// (batched decoding: its accumulators fill the registers).
constexpr int64_t kMaxBatch = 8;
// The most vectors one call multiplies (a short prefill: a warm prompt-cache
// question's ~15 new tokens). Above kMaxBatch the vectors go in groups, each
// over a tile of rows small enough to stay in the cache, so that a call still
// reads its weights from memory once: the first group brings a tile in, the
// others find it there.
constexpr int64_t kMaxVectors = 4 * kMaxBatch;

// A row-major bf16 matrix owned by someone else. Rows are `cols` apart.
struct Bf16Matrix {
  const uint16_t* data = nullptr;  // raw bfloat16 bits; never written
  int64_t rows = 0;
  int64_t cols = 0;
};

// Y[n, m] = sum_k X[n, k] · W[m, k] for n < batch (1..kMaxVectors).
// x holds batch rows of w.cols floats, y batch rows of w.rows floats; they
// must not overlap. `isa`: the tier whose code runs.
// x_is_bf16: the caller promises every x value is a bf16 value (e.g. widened
// bf16 activations). Then, on the avx512 tier of a CPU with AVX512-BF16, the
// dot-product instruction does two multiply-adds per lane at once, which
// matters once a batch makes the GEMV compute-bound. Its bits differ from the
// FMA kernels' (it adds each pair in its own order and flushes denormals).
// Throws qvl::Error on a bad batch or matrix, or a tier this CPU cannot run.
void gemv_bf16(const Bf16Matrix& w, const float* x, float* y, int64_t batch = 1, Isa isa = active_isa(),
               bool x_is_bf16 = false);

// bfloat16 <-> float32 conversions (round to nearest even; NaN stays NaN).
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);

}  // namespace qvl::kernels
