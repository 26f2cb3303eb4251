// Matrix-vector products for decoding: y = W·x with W in bfloat16, read in
// place (usually straight from the mmapped checkpoint). Decoding one token
// reads every weight once, so these kernels are about streaming W at memory
// speed; x and y stay float32 so W·x is as exact as float32 accumulation allows.
//
// Rows are split across ATen's thread pool (at::set_num_threads applies).
// Every code path gives results that do not depend on the thread count.
#pragma once
#include <cstdint>

namespace qvl::kernels {

// The longest batch of vectors one call multiplies (batched decoding).
constexpr int64_t kMaxBatch = 8;

// A row-major bf16 matrix owned by someone else. Rows are `cols` apart.
struct Bf16Matrix {
  const uint16_t* data = nullptr;  // raw bfloat16 bits; never written
  int64_t rows = 0;
  int64_t cols = 0;
};

// Which code does the arithmetic.
enum class Bf16Path {
  Best,          // Avx512Fma when the CPU has AVX-512F, else Scalar
  Scalar,        // portable C++; the same bits as Avx512Fma
  Avx512Fma,     // bf16 -> f32 by shifting, float32 FMA: x is used exactly
  Avx512DotBf16, // _mm512_dpbf16_ps: x is rounded to bf16 first (less exact)
};

bool cpu_has_avx512();      // AVX-512 F + BW
bool cpu_has_avx512_bf16(); // and AVX512-BF16
bool cpu_has_avx512_vnni(); // and AVX512-VNNI
// Whether `path` can run here (Best and Scalar always can).
bool path_supported(Bf16Path path);
const char* path_name(Bf16Path path);

// Y[n, m] = sum_k X[n, k] · W[m, k] for n < batch (1..kMaxBatch).
// x holds batch rows of w.cols floats, y batch rows of w.rows floats; they
// must not overlap.
// Throws qvl::Error on a bad batch or a path this CPU cannot run.
void gemv_bf16(const Bf16Matrix& w, const float* x, float* y, int64_t batch = 1,
               Bf16Path path = Bf16Path::Best);

// bfloat16 <-> float32 conversions (round to nearest even; NaN stays NaN).
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);

}  // namespace qvl::kernels
