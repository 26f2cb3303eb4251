// The avx2 tier's attention: attention_detail.h's float32 algorithm on 8-lane
// registers with FMA (tiles of 16 queries, 4 keys or 4 dims at a time: 8
// accumulators and the operands fit the 16 registers). bf16 keys and values
// are widened once per block of queries. Built with AVX2+FMA+F16C and entered
// only when that tier is active.
#include <immintrin.h>

#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::attention_detail {
namespace {

struct Avx2Ops {
  static constexpr int kWidth = 8, kQueryVectors = 2, kKeyTile = 4, kDimTile = 4;
  static constexpr int64_t kKeyBlock = 64;
  using Vec = __m256;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float a) { return _mm256_set1_ps(a); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, Vec a) { _mm256_storeu_ps(p, a); }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }
  static Vec exp(Vec a) { return simd_avx2::exp_poly(a); }
};

}  // namespace

void attend_avx2(Storage s, const Job& job) {
  s == Storage::F32 ? attend_f32<Avx2Ops, float>(job) : attend_f32<Avx2Ops, uint16_t>(job);
}

}  // namespace qvl::kernels::attention_detail
