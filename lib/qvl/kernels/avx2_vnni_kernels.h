// Internal to the avx2-vnni tier (kernels/cpu.h): its kernels, compiled twice
// from this one source, by int8_avx_vnni.cpp with AVX-VNNI's VEX encoding of
// the 256-bit vpdpbusd (Alder Lake and later Intel clients) and by
// int8_avx_vnni_evex.cpp with AVX512-VNNI+VL's EVEX encoding (so that an
// AVX-512 machine runs and tests what those CPUs run). Everything is in an
// unnamed namespace: each file keeps its own copy, built with its own flags.
//   - the int8 GEMM's Dot policy (int8_gemm_ymm.h): the weights packed as
//     q + 128, unsigned, and each row's group sums starting at −x_bias
//     (−128 · Σ xq) to undo it, as the avx512 tier's VNNI kernel does: one
//     instruction where avx2 takes four, tiles of 6 rows × 16 columns (12
//     accumulators, 2 weight registers and a broadcast: 15 of the 16 ymm
//     registers VEX code has);
//   - the int8 attention scores (attention_detail.h, score_int8_*) on the
//     avx2 kernel's tile of 16 queries, as attention_avx512_vnni.cpp does
//     them: the queries unsigned as q + 128, each key's 4 bytes broadcast
//     signed, each key's sums starting at −128 · Σ k.
#pragma once
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/dot_product_asm.h"
#include "qvl/kernels/int8_gemm_ymm.h"

#if !defined(__AVXVNNI__) && !(defined(__AVX512VNNI__) && defined(__AVX512VL__))
#error "avx2_vnni_kernels.h needs -mavxvnni, or -mavx512vnni -mavx512vl"
#endif

namespace qvl::kernels::avx2_vnni {
namespace {

// int8_gemm_ymm.h's Dot policy.
struct GemmDot {
  static constexpr int kTileRows = 6;
  static constexpr uint8_t kFlip = 0x80;  // q + 128
  using Weights = __m256i;
  static Weights load(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
  static __m256i start(int32_t x_bias) { return _mm256_set1_epi32(-x_bias); }
  static __m256i add(__m256i acc, Weights w, __m256i xb) { return dot_asm::dpbusd256(acc, w, xb); }
};

inline void gemm_panels(const detail::Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  detail::ymm_gemm::Kernel<GemmDot>::panels(job, first_panel, end_panel);
}

// The avx2 kernel's tile (attention_avx2.cpp): 16 queries, 4 keys at a time:
// 8 accumulators, 2 query registers, a key and the flip constant.
constexpr int kScoreWidth = 8, kQueryVectors = 2, Q = kScoreWidth * kQueryVectors, kKeyTile = 4;

// s[j][lane] for the J keys from `first`.
template <int J>
void score_keys(const attention_detail::Int8Operands& op, int64_t first, float* s) {
  const int64_t padded_dim = op.keys.padded_dim;
  const int8_t* k = op.keys.values + first * padded_dim;
  const __m256i flip = _mm256_set1_epi32(int32_t(0x80808080u));
  __m256i acc[J][kQueryVectors];
  for (int j = 0; j < J; ++j) {
    const __m256i start = _mm256_set1_epi32(-128 * op.keys.sums[first + j]);
    for (int u = 0; u < kQueryVectors; ++u) acc[j][u] = start;
  }
  for (int64_t step = 0; step < padded_dim / 4; ++step) {
    __m256i query[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u)
      query[u] = _mm256_xor_si256(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(op.tile.values + (step * Q + u * kScoreWidth) * 4)), flip);
    for (int j = 0; j < J; ++j) {
      int32_t four;
      std::memcpy(&four, k + j * padded_dim + 4 * step, 4);
      const __m256i key = _mm256_set1_epi32(four);
      for (int u = 0; u < kQueryVectors; ++u) acc[j][u] = dot_asm::dpbusd256(acc[j][u], query[u], key);
    }
  }
  for (int u = 0; u < kQueryVectors; ++u) {
    const __m256 query_scales = _mm256_loadu_ps(op.tile.scales + u * kScoreWidth);
    for (int j = 0; j < J; ++j) {
      const __m256 scales = _mm256_mul_ps(query_scales, _mm256_set1_ps(op.keys.scales[first + j]));
      _mm256_storeu_ps(s + j * Q + u * kScoreWidth, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[j][u]), scales));
    }
  }
}

// attention_detail.h's score_int8_* for a tile of 16 queries.
void score_int8(const attention_detail::Int8Operands& op, int64_t first, int64_t keys, float* s) {
  int64_t j = 0;
  for (; j + kKeyTile <= keys; j += kKeyTile) score_keys<kKeyTile>(op, first + j, s + j * Q);
  for (; j < keys; ++j) score_keys<1>(op, first + j, s + j * Q);
}

}  // namespace
}  // namespace qvl::kernels::avx2_vnni
