// The avx2 tier's attention: attention_detail.h's float32 algorithm on 8-lane
// registers with FMA (tiles of 16 queries, 4 keys or 4 dims at a time: 8
// accumulators and the operands fit the 16 registers). bf16 keys and values
// are widened once per block of queries. Built with AVX2+FMA+F16C and entered
// only when that tier or avx2-vnni is active (or, for int8 scores, the
// avx512 tier on a CPU without AVX512-VNNI).
//
// int8 scores: AVX2 has no vpdpbusd, and vpmaddubsw (unsigned × signed bytes,
// pairs summed into int16 with saturation) would saturate on q + 128 (up to
// 255 · 127 · 2). As int8_gemm_avx2.cpp does: |q| is the unsigned operand and
// k with q's sign (vpsignb) the signed one, so a pair is at most 127 · 127 ·
// 2 = 32258 and never saturates; vpmaddwd by ones widens the pairs into the
// int32 lane of 4 dims. The sums are then exact.
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/dot_product_asm.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::attention_detail {
namespace {

// Tiles of 16 queries (2 registers), 4 keys at a time: 8 accumulators, the
// queries and their magnitudes, a key, a product and the ones fit the 16
// registers.
constexpr int kInt8Tile = 16, kInt8KeyTile = 4;

// attention_detail.h's quantization of rows, 8 values at a time.
template <class T>
void quantize_rows_int8(const T* x, int64_t rows, int64_t head_dim, int64_t padded_dim, int8_t* values,
                        float* scales, int32_t* sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * head_dim;
    int8_t* out = values + r * padded_dim;
    for (int64_t d = head_dim; d < padded_dim; ++d) out[d] = 0;
    // maxps returns its second operand when either is NaN: a NaN is skipped.
    __m256 max = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += 8)
      max = _mm256_max_ps(_mm256_andnot_ps(sign, simd_avx2::load(row + d, head_dim - d)), max);
    const float max_abs = simd_avx2::reduce_max(max);
    scales[r] = max_abs / 127.0f;
    sums[r] = 0;
    if (max_abs == 0.0f) {
      std::memset(out, 0, size_t(head_dim));
      continue;
    }
    const __m256 inverse = _mm256_set1_ps(127.0f / max_abs);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t d = 0; d < head_dim; d += 8) {
      const __m256 scaled = _mm256_mul_ps(simd_avx2::load(row + d, head_dim - d), inverse);
      const __m256 level = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i q = _mm256_cvtps_epi32(
          _mm256_min_ps(_mm256_max_ps(level, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f)));
      sum = _mm256_add_epi32(sum, q);
      // ±127 at most: the saturating packs change nothing.
      const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      const int64_t bytes = _mm_cvtsi128_si64(_mm_packs_epi16(words, words));
      std::memcpy(out + d, &bytes, size_t(head_dim - d < 8 ? head_dim - d : 8));
    }
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), sum);
    for (int32_t lane : lanes) sums[r] += lane;
  }
}

// s[j][lane] for the J keys from `first` (attention_detail.h: score_int8_*).
template <int J>
void score_keys_int8(const Int8Operands& op, int64_t first, float* s) {
  const int64_t padded_dim = op.keys.padded_dim;
  const int8_t* k = op.keys.values + first * padded_dim;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[J][2];
  for (auto& row : acc)
    for (__m256i& a : row) a = _mm256_setzero_si256();
  for (int64_t step = 0; step < padded_dim / 4; ++step) {
    __m256i query[2], magnitude[2];
    for (int u = 0; u < 2; ++u) {
      query[u] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(op.tile.values + (step * kInt8Tile + 8 * u) * 4));
      magnitude[u] = _mm256_abs_epi8(query[u]);
    }
    for (int j = 0; j < J; ++j) {
      int32_t four;
      std::memcpy(&four, k + j * padded_dim + 4 * step, 4);
      const __m256i key = _mm256_set1_epi32(four);
      for (int u = 0; u < 2; ++u) acc[j][u] = dot_asm::sign_maddubs_add(acc[j][u], query[u], magnitude[u], key, ones);
    }
  }
  for (int u = 0; u < 2; ++u) {
    const __m256 query_scales = _mm256_loadu_ps(op.tile.scales + 8 * u);
    for (int j = 0; j < J; ++j) {
      const __m256 scales = _mm256_mul_ps(query_scales, _mm256_set1_ps(op.keys.scales[first + j]));
      _mm256_storeu_ps(s + j * kInt8Tile + 8 * u, _mm256_mul_ps(_mm256_cvtepi32_ps(acc[j][u]), scales));
    }
  }
}

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
  static void score_int8(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
    score_int8_avx2(op, first, keys, s);
  }
  static constexpr QuantizeRows quantize = quantize_rows_avx2;
};
static_assert(Avx2Ops::kWidth * Avx2Ops::kQueryVectors == kInt8Tile, "the int8 scores' tile is the kernel's");

// The avx2-vnni tier: the same kernel, its int8 scores through a 256-bit
// vpdpbusd (int8_avx_vnni*.cpp, built with the instruction this file is not).
struct Avx2VnniOps : Avx2Ops {
  static void score_int8(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
    static const auto score = cpu_features().avx_vnni ? score_int8_avx_vnni : score_int8_avx_vnni_evex;
    score(op, first, keys, s);
  }
};

}  // namespace

void quantize_rows_avx2(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                        int8_t* values, float* scales, int32_t* sums) {
  if (s == Storage::F32)
    quantize_rows_int8(static_cast<const float*>(x), rows, head_dim, padded_dim, values, scales, sums);
  else
    quantize_rows_int8(static_cast<const uint16_t*>(x), rows, head_dim, padded_dim, values, scales, sums);
}

void score_int8_avx2(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
  int64_t j = 0;
  for (; j + kInt8KeyTile <= keys; j += kInt8KeyTile)
    score_keys_int8<kInt8KeyTile>(op, first + j, s + j * kInt8Tile);
  for (; j < keys; ++j) score_keys_int8<1>(op, first + j, s + j * kInt8Tile);
}

void attend_avx2(const Job& job) {
  job.storage == Storage::F32 ? attend_f32<Avx2Ops, float>(job) : attend_f32<Avx2Ops, uint16_t>(job);
}

void attend_avx2_vnni(const Job& job) {
  job.storage == Storage::F32 ? attend_f32<Avx2VnniOps, float>(job) : attend_f32<Avx2VnniOps, uint16_t>(job);
}

}  // namespace qvl::kernels::attention_detail
