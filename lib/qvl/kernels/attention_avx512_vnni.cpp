// The avx512 tier's int8 scores (attention.h, AttentionScores::Int8) on CPUs
// with AVX512-VNNI: vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes
// and adds them to an int32, so a step of 4 dims is one instruction per 16
// queries and key, where vdpbf16ps takes two (2 dims each).
//
// vpdpbusd's unsigned operand is the query tile, as q + 128 (q ^ 0x80 per
// byte, 1..255); the key's 4 bytes are broadcast signed from its row. Then
// Σ (q + 128) · k = Σ q · k + 128 · Σ k, so each key's sums start at
// −128 · Σ k (its row sum from the quantization) and end at the exact Σ q · k
// (|sum| <= 255 · 127 · head_dim: int32 for any head_dim that fits memory).
// The other way round (keys unsigned) would need the bias applied per query
// tile instead; either is one broadcast per key and block.
//
// Also the avx512 tier's quantization of q and k for these scores (which
// needs no VNNI, but runs only where they do).
//
// Built with AVX-512 F+BW+VL+DQ and AVX512-VNNI; entered only when the avx512
// tier is active on a CPU with AVX512-VNNI.
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/dot_product_asm.h"
#include "qvl/kernels/simd_avx512.h"

namespace qvl::kernels::attention_detail {
namespace {

// The avx512 kernels' tile of 32 queries (2 registers), 4 keys at a time: 8
// accumulators. Measured on Zen 4 (one thread, 64 keys × 32 queries × 64
// dims per call): ~12 % faster than 8 keys at a time (as the float scores
// take them); 4 keys × 64 queries about as fast; 2 keys (× 32 or × 64
// queries) slower.
constexpr int W = 16, kQueryVectors = 2, Q = W * kQueryVectors, kKeyTile = 4;

// attention_detail.h's quantization of rows, 16 values at a time.
template <class T>
void quantize_rows_int8(const T* x, int64_t rows, int64_t head_dim, int64_t padded_dim, int8_t* values,
                        float* scales, int32_t* sums) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * head_dim;
    int8_t* out = values + r * padded_dim;
    for (int64_t d = head_dim; d < padded_dim; ++d) out[d] = 0;
    // maxps returns its second operand when either is NaN: a NaN is skipped.
    __m512 max = _mm512_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += W)
      max = _mm512_max_ps(_mm512_abs_ps(simd_avx512::load(row + d, simd_avx512::tail_mask(head_dim - d))), max);
    const float max_abs = _mm512_reduce_max_ps(max);
    scales[r] = max_abs / 127.0f;
    sums[r] = 0;
    if (max_abs == 0.0f) {
      std::memset(out, 0, size_t(head_dim));
      continue;
    }
    const __m512 inverse = _mm512_set1_ps(127.0f / max_abs);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t d = 0; d < head_dim; d += W) {
      const __mmask16 m = simd_avx512::tail_mask(head_dim - d);
      const __m512 scaled = _mm512_mul_ps(simd_avx512::load(row + d, m), inverse);
      const __m512 level = _mm512_roundscale_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i q = _mm512_cvtps_epi32(
          _mm512_min_ps(_mm512_max_ps(level, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f)));
      sum = _mm512_add_epi32(sum, q);
      _mm512_mask_cvtepi32_storeu_epi8(out + d, m, q);
    }
    sums[r] = _mm512_reduce_add_epi32(sum);
  }
}

// s[j][lane] for the J keys from `first`.
template <int J>
void score_keys(const Int8Operands& op, int64_t first, float* s) {
  const int64_t padded_dim = op.keys.padded_dim;
  const int8_t* k = op.keys.values + first * padded_dim;
  const __m512i flip = _mm512_set1_epi32(int32_t(0x80808080u));
  __m512i acc[J][kQueryVectors];
  for (int j = 0; j < J; ++j) {
    const __m512i start = _mm512_set1_epi32(-128 * op.keys.sums[first + j]);
    for (int u = 0; u < kQueryVectors; ++u) acc[j][u] = start;
  }
  for (int64_t step = 0; step < padded_dim / 4; ++step) {
    __m512i query[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u)
      query[u] = _mm512_xor_si512(_mm512_loadu_si512(op.tile.values + (step * Q + u * W) * 4), flip);
    for (int j = 0; j < J; ++j) {
      int32_t four;
      std::memcpy(&four, k + j * padded_dim + 4 * step, 4);
      const __m512i key = _mm512_set1_epi32(four);
      for (int u = 0; u < kQueryVectors; ++u) acc[j][u] = dot_asm::dpbusd512(acc[j][u], query[u], key);
    }
  }
  for (int u = 0; u < kQueryVectors; ++u) {
    const __m512 query_scales = _mm512_loadu_ps(op.tile.scales + u * W);
    for (int j = 0; j < J; ++j) {
      const __m512 scales = _mm512_mul_ps(query_scales, _mm512_set1_ps(op.keys.scales[first + j]));
      _mm512_storeu_ps(s + j * Q + u * W, _mm512_mul_ps(_mm512_cvtepi32_ps(acc[j][u]), scales));
    }
  }
}

}  // namespace

void quantize_rows_avx512(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                          int8_t* values, float* scales, int32_t* sums) {
  if (s == Storage::F32)
    quantize_rows_int8(static_cast<const float*>(x), rows, head_dim, padded_dim, values, scales, sums);
  else
    quantize_rows_int8(static_cast<const uint16_t*>(x), rows, head_dim, padded_dim, values, scales, sums);
}

void score_int8_avx512_vnni(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
  int64_t j = 0;
  for (; j + kKeyTile <= keys; j += kKeyTile) score_keys<kKeyTile>(op, first + j, s + j * Q);
  for (; j < keys; ++j) score_keys<1>(op, first + j, s + j * Q);
}

}  // namespace qvl::kernels::attention_detail
