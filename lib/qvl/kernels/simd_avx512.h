// Helpers of the avx512 tier's element-wise kernels (decode_ops_avx512.cpp,
// vision_ops_avx512.cpp): 16 float lanes per register, f32 or bf16 in memory.
// Needs AVX-512 F+BW+VL+DQ only. Include it from *_avx512.cpp files alone;
// everything is `static` so no copy compiled with AVX-512 leaks to others.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "qvl/kernels/simd_portable.h"  // kLanes, the exp constants

namespace qvl::kernels::simd_avx512 {

using simd_portable::kLanes;  // 16: one register

static inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= kLanes ? __mmask16(0xffff) : remaining <= 0 ? __mmask16(0) : __mmask16((1u << remaining) - 1);
}

// bf16 bits of each lane in the low half of a 32-bit lane, rounded to nearest
// even as gemv.h's float_to_bf16 does (a NaN stays a NaN). Integer arithmetic,
// so no AVX512-BF16 (whose conversion also flushes denormals) is needed.
static inline __m512i bf16_bits(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet_nan);
}

// Loads and stores of 16 values as floats; masked-off lanes load as 0 and are
// neither read nor written.
static inline __m512 load(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
static inline __m512 load(const uint16_t* p, __mmask16 m) {
  const __m512i widened = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(widened, 16));
}
static inline void store(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
static inline void store(uint16_t* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(bf16_bits(v)));
}
// The value a store to T would keep.
static inline __m512 round_to(const float*, __m512 v) { return v; }
static inline __m512 round_to(const uint16_t*, __m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16));
}

// Lane i + 8, then i + 4, i + 2, i + 1 into lane 0 (simd_portable.h's order).
static inline float reduce_pairwise(__m512 v) {
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// simd_portable.h's polynomial with FMA.
static inline __m512 exp_poly(__m512 x) {
  using namespace simd_portable;
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kExpMax)), _mm512_set1_ps(kExpMin));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2High), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Low), r);
  __m512 p = _mm512_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
  return _mm512_scalef_ps(p, n);
}

template <class T>
static inline void prefetch_range(const T* p, int64_t count) {
  const char* bytes = reinterpret_cast<const char*>(p);
  for (int64_t offset = 0; offset < count * int64_t(sizeof(T)); offset += 64) _mm_prefetch(bytes + offset, _MM_HINT_T0);
}

}  // namespace qvl::kernels::simd_avx512
