// Helpers of the avx2 tier's element-wise kernels (decode_ops_avx2.cpp,
// vision_ops_avx2.cpp): 8 float lanes per register, f32 or bf16 in memory.
// Needs AVX2 + FMA. Include it from *_avx2.cpp (and *_avx_vnni*) files alone; everything is
// `static` so no copy compiled with AVX2 leaks to other files.
//
// Where the avx512 kernels keep 16 lanes of partial sums, these keep the same
// 16 lanes as a pair of registers (F32x16) and reduce them in the same order,
// so both tiers give the same bits.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "qvl/kernels/simd_portable.h"  // the exp constants

namespace qvl::kernels::simd_avx2 {

constexpr int kLanes = 8;

// All ones in the lanes below `count` (any count: ≤ 0 is none, ≥ 8 all).
static inline __m256i lane_mask(int64_t count) {
  const int clamped = count <= 0 ? 0 : count >= kLanes ? kLanes : int(count);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(clamped), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// bf16 bits of each lane in the low half of a 32-bit lane, rounded to nearest
// even as gemv.h's float_to_bf16 does (a NaN stays a NaN).
static inline __m256i bf16_bits(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_castps_si256(
      _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet_nan), is_nan));
}

// 8 values as floats.
static inline __m256 load(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 load(const uint16_t* p) {
  const __m256i widened = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(widened, 16));
}
static inline void store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
static inline void store(uint16_t* p, __m256 v) {
  const __m256i bits = bf16_bits(v);  // < 2^16 per lane: the unsigned saturation never bites
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// The first `count` of 8 values (count may be ≤ 0 or ≥ 8): the other lanes
// load as 0 and are neither read nor written, so p may point past the end.
// AVX2 masks only 32-bit lanes: bf16 tails go through a small buffer.
static inline __m256 load(const float* p, int64_t count) {
  return count >= kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lane_mask(count));
}
static inline __m256 load(const uint16_t* p, int64_t count) {
  if (count >= kLanes) return load(p);
  alignas(16) uint16_t part[kLanes] = {};
  for (int64_t i = 0; i < count; ++i) part[i] = p[i];
  return load(part);
}
static inline void store(float* p, __m256 v, int64_t count) {
  if (count >= kLanes)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, lane_mask(count), v);
}
static inline void store(uint16_t* p, __m256 v, int64_t count) {
  if (count >= kLanes) return store(p, v);
  alignas(16) uint16_t part[kLanes];
  store(part, v);
  for (int64_t i = 0; i < count; ++i) p[i] = part[i];
}

// f(i, count) for the vectors of [begin, end): full ones (count == 8, a
// constant once f is inlined, so their loads and stores take no branch),
// then a partial one if any.
template <class F>
static inline void for_each_vector(int64_t begin, int64_t end, F&& f) {
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) f(i, int64_t(kLanes));
  if (i < end) f(i, end - i);
}

// The value a store to T would keep.
static inline __m256 round_to(const float*, __m256 v) { return v; }
static inline __m256 round_to(const uint16_t*, __m256 v) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16));
}

// v with the lanes from `count` on set to 0.
static inline __m256 keep_first(__m256 v, int64_t count) {
  return count >= kLanes ? v : _mm256_and_ps(v, _mm256_castsi256_ps(lane_mask(count)));
}

// simd_portable.h's polynomial with FMA, lane for lane what the avx512 tier
// computes: its _mm512_scalef_ps(p, n) is exact here (the result is a normal
// float), and so is adding n to p's exponent bits. (An integer add, unlike a
// float multiply, is never fused with a following add into an FMA by
// -ffp-contract, which would change the bits.)
static inline __m256 exp_poly(__m256 x) {
  using namespace simd_portable;
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kExpMax)), _mm256_set1_ps(kExpMin));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2High), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Low), r);
  __m256 p = _mm256_set1_ps(kExpTaylor[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTaylor[i]));
  const __m256i exponent_step = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), exponent_step));
}

static inline float reduce_max(__m256 v) {
  const __m128 four = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_max_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_max_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// 16 lanes of partial sums as the avx512 tier keeps them in one register:
// lanes 0-7 in lo, 8-15 in hi.
struct F32x16 {
  __m256 lo, hi;
};
static inline F32x16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline F32x16 add(F32x16 a, F32x16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
template <class T>
static inline F32x16 load16(const T* p, int64_t count) {
  return {load(p, count), load(p + kLanes, count - kLanes)};
}

// Lane i + 8, then i + 4, i + 2, i + 1 into lane 0: simd_avx512.h's
// reduce_pairwise on the register this pair stands for.
static inline float reduce_pairwise(F32x16 v) {
  const __m256 eight = _mm256_add_ps(v.lo, v.hi);
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

template <class T>
static inline void prefetch_range(const T* p, int64_t count) {
  const char* bytes = reinterpret_cast<const char*>(p);
  for (int64_t offset = 0; offset < count * int64_t(sizeof(T)); offset += 64) _mm_prefetch(bytes + offset, _MM_HINT_T0);
}

}  // namespace qvl::kernels::simd_avx2
