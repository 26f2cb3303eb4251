// What the decode kernels' two vector tiers share (decode_ops_avx2.cpp,
// decode_ops_avx512.cpp): the norms' sum in ATen's order (decode_ops.h,
// sum_of_squares_in_order) on 8-lane vectors, and the choice of width. Needs
// AVX2 + FMA; include it from those files alone. Everything sits in an
// anonymous namespace, so each file gets its own copy, built with its flags.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "qvl/kernels/decode_ops_detail.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::decode_detail {
namespace {

// ATen's sum order on vectors of 8 lanes (cascade_sum_of_squares's L).
struct Lanes8 {
  using V = __m256;
  static constexpr int kWidth = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  template <class T>
  static V square(const T* p) {
    const V v = simd_avx2::load(p);
    return _mm256_mul_ps(v, v);
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
};

// Σ x² in ATen's order on `lanes` lanes: Lanes16 is the tier's 16-lane L.
template <class Lanes16, class T>
float vector_sum_of_squares(const T* x, int64_t n, int lanes) {
  if (lanes == 16 && n >= 16) return cascade_sum_of_squares<Lanes16>(x, n);
  if (lanes == 8 && n >= 8) return cascade_sum_of_squares<Lanes8>(x, n);
  // Shorter than a vector: ATen adds one value at a time (the portable code).
  return sum_of_squares_in_order(sizeof(T) == 4 ? Storage::F32 : Storage::BF16, x, n, lanes);
}

}  // namespace
}  // namespace qvl::kernels::decode_detail
