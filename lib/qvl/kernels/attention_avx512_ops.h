// The avx512 tier's vector operations for attention_detail.h's algorithm
// (attention_avx512.cpp, attention_avx512_bf16.cpp; the int8 scores'
// kernel is attention_avx512_vnni.cpp). Include it from *_avx512*.cpp files
// alone.
#pragma once
#include <immintrin.h>

#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/simd_avx512.h"

namespace qvl::kernels::attention_detail {
namespace {

struct Avx512Ops {
  static constexpr int kWidth = 16, kQueryVectors = 2, kKeyTile = 8, kDimTile = 8;
  static constexpr int64_t kKeyBlock = 64;
  using Vec = __m512;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec set1(float a) { return _mm512_set1_ps(a); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vec a) { _mm512_storeu_ps(p, a); }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }
  static Vec exp(Vec a) { return simd_avx512::exp_poly(a); }
  // Called only where the CPU has AVX512-VNNI (attend_block's dispatch).
  static void score_int8(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
    score_int8_avx512_vnni(op, first, keys, s);
  }
  static constexpr QuantizeRows quantize = quantize_rows_avx512;  // (with AVX512-VNNI too, as score_int8)
};
static_assert(Avx512Ops::kWidth * Avx512Ops::kQueryVectors == 32, "score_int8_avx512_vnni's tile of 32 queries");

}  // namespace
}  // namespace qvl::kernels::attention_detail
