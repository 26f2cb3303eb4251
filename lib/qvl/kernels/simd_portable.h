// What the element-wise kernels of every tier share: the constants of their
// exponential, and the scalar helpers of the portable (generic/neon) code.
//
// The portable helpers are written so that GCC vectorizes the loops calling
// them for the baseline ISA (SSE2 on x86-64, NEON on aarch64): no libm calls,
// bf16 conversions by bit manipulation, selects the compiler turns into
// min/max/blend instructions. The loops keep 16 lanes of partial sums where
// the vector tiers do, in fixed-length inner loops the compiler unrolls.
//
// Everything is `static` (or constexpr): the per-tier files include this too,
// and an inline function compiled with AVX-512 must never be the copy the
// linker keeps for the others.
#pragma once
#include <cstdint>
#include <cstring>

namespace qvl::kernels::simd_portable {

// Floats in a 512-bit register: the partial-sum layout every tier keeps.
constexpr int kLanes = 16;

// e^x by one polynomial on every tier (the vector tiers evaluate it with FMA,
// lane by lane the same, so they agree bit for bit): x clamped to [-87, 88],
// x = n·ln2 + r with n = round(x·log2 e) so |r| ≤ ln2/2, e^r by Taylor to r^7
// (truncation below 1e-8 relative there), times 2^n. Inputs below -87 give
// ~1e-38 instead of 0 or a denormal, which no caller can tell from 0 after
// normalizing or rounding. The clamp keeps e^x a normal float (2^-126 <
// e^-87, e^88 < 2^128), so scaling by 2^n is exact: one instruction's
// scalef, another's multiply and adding n to the exponent bits all agree.
constexpr float kExpMin = -87.0f, kExpMax = 88.0f;
constexpr float kLog2e = 1.44269504088896341f;
// ln2 in two parts: n·kLn2High is exact for |n| < 256.
constexpr float kLn2High = 0.693145751953125f, kLn2Low = 1.4286068203094172e-06f;
constexpr float kExpTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

static inline uint32_t bits_of(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}
static inline float float_of(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// bf16 <-> float as gemv.h's bf16_to_float/float_to_bf16 (round to nearest
// even, a NaN stays a NaN), but inline so that loops over them vectorize.
static inline float widen_bf16(uint16_t bits) { return float_of(uint32_t(bits) << 16); }
static inline uint16_t narrow_to_bf16(float v) {
  const uint32_t bits = bits_of(v);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;  // an integer test: see select()
  return uint16_t(is_nan ? quiet_nan : rounded);
}

// Element i of an activation array as a float, and back.
static inline float load(const float* p, int64_t i) { return p[i]; }
static inline float load(const uint16_t* p, int64_t i) { return widen_bf16(p[i]); }
static inline void store(float* p, int64_t i, float v) { p[i] = v; }
static inline void store(uint16_t* p, int64_t i, float v) { p[i] = narrow_to_bf16(v); }
// v as a store to that array would keep it.
static inline float round_to(const float*, float v) { return v; }
static inline float round_to(const uint16_t*, float v) { return widen_bf16(narrow_to_bf16(v)); }

// condition ? a : b as a bit blend. Under -ftrapping-math (GCC's default)
// GCC does not turn a branch on a float comparison into a vector select, so
// a plain ?: on one would keep the whole loop scalar.
static inline float select(bool condition, float a, float b) {
  const uint32_t mask = 0u - uint32_t(condition);
  return float_of((bits_of(a) & mask) | (bits_of(b) & ~mask));
}
static inline float min_of(float a, float b) { return select(a < b, a, b); }  // minps: b if either is NaN
static inline float max_of(float a, float b) { return select(a > b, a, b); }  // maxps: b if either is NaN

// The polynomial above without FMA (the baseline ISAs lack it, and a libm
// fma call per element would be slow): a few float ulps from e^x, not the
// vector tiers' bits.
static inline float exp_poly(float x) {
  x = max_of(min_of(x, kExpMax), kExpMin);
  // Adding 1.5·2^23 leaves no fraction bits: the sum is rounded to an
  // integer, to nearest even, as the vector tiers' round instruction does.
  constexpr float kRoundingMagic = 12582912.0f;
  const float n = (x * kLog2e + kRoundingMagic) - kRoundingMagic;
  float r = x - n * kLn2High;
  r = r - n * kLn2Low;
  // Spelled out: GCC vectorizes no loop with an inner loop left in it.
  float p = kExpTaylor[0] * r + kExpTaylor[1];
  p = p * r + kExpTaylor[2];
  p = p * r + kExpTaylor[3];
  p = p * r + kExpTaylor[4];
  p = p * r + kExpTaylor[5];
  p = p * r + kExpTaylor[6];
  p = p * r + kExpTaylor[7];
  return float_of(bits_of(p) + (uint32_t(int32_t(n)) << 23));  // p·2^n
}

// Lane i + 8, then i + 4, i + 2, i + 1 into lane 0: the order every tier
// reduces its 16 lanes of partial sums in.
static inline float reduce_pairwise(float (&lanes)[kLanes]) {
  // Spelled out: GCC leaves a loop over the widths rolled.
  for (int i = 0; i < 8; ++i) lanes[i] += lanes[i + 8];
  for (int i = 0; i < 4; ++i) lanes[i] += lanes[i + 4];
  for (int i = 0; i < 2; ++i) lanes[i] += lanes[i + 2];
  return lanes[0] + lanes[1];
}

}  // namespace qvl::kernels::simd_portable
