// The avx512 tier's attention for bf16 activations on CPUs with AVX512-BF16:
// both products in vdpbf16ps, which multiplies pairs of bf16 and adds them
// to float32 sums. Scores pair up dimensions: a query tile is stored as
// (q[d], q[d+1]) pairs per lane and each key's pair is broadcast straight
// from its row. The weighted sum pairs up keys: the block's softmax weights
// are rounded to bf16 and paired (p[j], p[j+1]) per lane, and the values are
// repacked once per block of queries as (v[j][d], v[j+1][d]) pairs. The
// softmax between them is attention_detail.h's, in float32, fused here with
// the rounding and pairing of the weights (vcvtne2ps2bf16 and one permute).
// With int8 scores (attention.h) the scores come from the VNNI kernel
// (attention_avx512_vnni.cpp) instead, and the rest is the same.
//
// Built with AVX-512 F+BW+VL+DQ and AVX512-BF16; entered only when that tier
// is active on a CPU with AVX512-BF16, for an even head_dim or int8 scores
// (and then only with AVX512-VNNI too).
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/attention_avx512_ops.h"
#include "qvl/kernels/attention_detail.h"

namespace qvl::kernels::attention_detail {
namespace {

// The float32 kernel's tiles (32 queries, blocks of 64 keys, 16
// accumulators). Tiles of 64 queries (4 products per broadcast operand
// instead of 2) ran no faster on Zen 4 and need more than L1.
using TileOps = Tile<Avx512Ops>;
constexpr int W = Avx512Ops::kWidth, Q = TileOps::Q, kQueryVectors = Avx512Ops::kQueryVectors;
constexpr int64_t kKeyBlock = Avx512Ops::kKeyBlock;
constexpr int kKeyTile = Avx512Ops::kKeyTile, kDimTile = Avx512Ops::kDimTile;

inline __m512bh as_bf16(__m512i x) { return (__m512bh)x; }

inline uint32_t load_pair(const uint16_t* p) {
  uint32_t pair;
  std::memcpy(&pair, p, sizeof pair);
  return pair;
}

// s[j][lane] = Σ_d k[j][d] · q[lane][d] for the J keys from k; qp holds the
// tile's queries as dim pairs, qp[d / 2][lane].
template <int J>
void score_keys(const uint16_t* k, int64_t head_dim, const uint32_t* qp, float* s) {
  __m512 acc[J][kQueryVectors];
  for (auto& row : acc)
    for (__m512& a : row) a = _mm512_setzero_ps();
  for (int64_t d = 0; d < head_dim; d += 2) {
    __m512i query[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u) query[u] = _mm512_loadu_si512(qp + (d / 2) * Q + u * W);
    for (int j = 0; j < J; ++j) {
      const __m512i key = _mm512_set1_epi32(int(load_pair(k + j * head_dim + d)));
      for (int u = 0; u < kQueryVectors; ++u) acc[j][u] = _mm512_dpbf16_ps(acc[j][u], as_bf16(query[u]), as_bf16(key));
    }
  }
  for (int j = 0; j < J; ++j)
    for (int u = 0; u < kQueryVectors; ++u) _mm512_storeu_ps(s + j * Q + u * W, acc[j][u]);
}

// ot[d][lane] = ot[d][lane] · alpha + Σ_j p[j][lane] · v[j][d] for the D
// dims from vp (key pair jp's row at vp + jp * head_dim); pp holds the
// weights as key pairs, pp[jp][lane].
template <int D>
void accumulate_values(const uint32_t* vp, int64_t head_dim, int64_t pairs, const uint32_t* pp, const __m512* alpha,
                       float* ot) {
  __m512 acc[D][kQueryVectors];
  for (int d = 0; d < D; ++d)
    for (int u = 0; u < kQueryVectors; ++u) acc[d][u] = _mm512_mul_ps(_mm512_loadu_ps(ot + d * Q + u * W), alpha[u]);
  for (int64_t jp = 0; jp < pairs; ++jp) {
    __m512i weight[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u) weight[u] = _mm512_loadu_si512(pp + jp * Q + u * W);
    for (int d = 0; d < D; ++d) {
      const __m512i value = _mm512_set1_epi32(int(vp[jp * head_dim + d]));
      for (int u = 0; u < kQueryVectors; ++u) acc[d][u] = _mm512_dpbf16_ps(acc[d][u], as_bf16(weight[u]), as_bf16(value));
    }
  }
  for (int d = 0; d < D; ++d)
    for (int u = 0; u < kQueryVectors; ++u) _mm512_storeu_ps(ot + d * Q + u * W, acc[d][u]);
}

// vp[jp][d] = (v[2jp][d], v[2jp + 1][d]), the key after an odd last one 0.
void pack_value_pairs(const uint16_t* v, int64_t head_dim, int64_t length, uint32_t* vp) {
  for (int64_t jp = 0; jp < (length + 1) / 2; ++jp) {
    const uint16_t* first = v + 2 * jp * head_dim;
    const bool has_second = 2 * jp + 1 < length;
    for (int64_t d = 0; d < head_dim; d += W) {
      const __mmask16 m = simd_avx512::tail_mask(head_dim - d);
      const __m512i low = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, first + d));
      const __m512i high = has_second ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, first + head_dim + d))
                                      : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(vp + jp * head_dim + d, m, _mm512_or_si512(low, _mm512_slli_epi32(high, 16)));
    }
  }
}

// The tile's queries as dim pairs, qp[d / 2][lane] (zero past the last query).
void pack_query_pairs(const uint16_t* q, int64_t head_dim, int64_t first, int64_t count, uint32_t* qp) {
  std::memset(qp, 0, size_t(head_dim / 2 * Q) * sizeof(uint32_t));
  for (int64_t i = 0; i < count; ++i)
    for (int64_t d = 0; d < head_dim; d += 2) qp[(d / 2) * Q + i] = load_pair(q + (first + i) * head_dim + d);
}

// The block's scores s[keys][Q] become their softmax weights, rounded to
// bf16 and stored as key pairs pp[jp][lane] = (p[2jp], p[2jp + 1]) (0 after
// an odd last key); otherwise Tile::softmax_block: the running maximum, alpha
// and sum = sum · alpha + the block's (rounded) weights.
void softmax_pairs(const float* s, int64_t keys, float scale, __m512* max, __m512* sum, __m512* alpha,
                   uint32_t* pp) {
  __m512 block_max[kQueryVectors];
  for (__m512& m : block_max) m = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < keys; ++j)
    for (int u = 0; u < kQueryVectors; ++u) block_max[u] = _mm512_max_ps(block_max[u], _mm512_loadu_ps(s + j * Q + u * W));
  const __m512 scale_v = _mm512_set1_ps(scale);
  for (int u = 0; u < kQueryVectors; ++u) {
    const __m512 new_max = _mm512_max_ps(max[u], block_max[u]);
    alpha[u] = simd_avx512::exp_poly(_mm512_mul_ps(_mm512_sub_ps(max[u], new_max), scale_v));
    max[u] = new_max;
  }
  // Word 2i of a pair vector from word i of the converted pair (key 2jp),
  // word 2i + 1 from word 16 + i (key 2jp + 1).
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i interleave = _mm512_load_si512(kInterleave);
  const __m512i high_half = _mm512_set1_epi32(int(0xffff0000u));
  __m512 block_sum[kQueryVectors];
  for (__m512& b : block_sum) b = _mm512_setzero_ps();
  const auto weight = [&](int64_t j, int u) {
    return simd_avx512::exp_poly(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j * Q + u * W), max[u]), scale_v));
  };
  for (int64_t jp = 0; jp < (keys + 1) / 2; ++jp)
    for (int u = 0; u < kQueryVectors; ++u) {
      const __m512 first = weight(2 * jp, u);
      const __m512 second = 2 * jp + 1 < keys ? weight(2 * jp + 1, u) : _mm512_setzero_ps();
      // Rounded to nearest even, as simd_avx512::bf16_bits (the weights are
      // normal floats, so flushing denormals changes nothing).
      const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(second, first);
      const __m512i pairs = _mm512_permutexvar_epi16(interleave, both);
      _mm512_storeu_si512(pp + jp * Q + u * W, pairs);
      block_sum[u] = _mm512_add_ps(block_sum[u], _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)));
      block_sum[u] = _mm512_add_ps(block_sum[u], _mm512_castsi512_ps(_mm512_and_si512(pairs, high_half)));
    }
  for (int u = 0; u < kQueryVectors; ++u) sum[u] = _mm512_add_ps(_mm512_mul_ps(sum[u], alpha[u]), block_sum[u]);
}

struct PairScratch {
  std::vector<uint32_t> values, queries, weights;
};

// The float scores (attention_detail.h's FloatScores in vdpbf16ps): the
// tile's queries as dim pairs, each key's pair broadcast from its row.
class PairScores {
 public:
  PairScores(const Job& job, PairScratch& pairs)
      : q_(static_cast<const uint16_t*>(job.q)), k_(static_cast<const uint16_t*>(job.k)), head_dim_(job.head_dim) {
    pairs.queries.resize(size_t(head_dim_ / 2 * Q));
    qp_ = pairs.queries.data();
  }
  void start_tile(int64_t first, int64_t count) { pack_query_pairs(q_, head_dim_, first, count, qp_); }
  void score(int64_t k0, int64_t keys, float* s) const {
    int64_t j = 0;
    for (; j + kKeyTile <= keys; j += kKeyTile) score_keys<kKeyTile>(k_ + (k0 + j) * head_dim_, head_dim_, qp_, s + j * Q);
    for (; j < keys; ++j) score_keys<1>(k_ + (k0 + j) * head_dim_, head_dim_, qp_, s + j * Q);
  }

 private:
  const uint16_t* q_;
  const uint16_t* k_;
  int64_t head_dim_;
  uint32_t* qp_;
};

template <class Scores>
void attend_pairs(const Job& job, Scores& scores, PairScratch& pairs) {
  const int64_t head_dim = job.head_dim, length = job.length;
  pairs.values.resize(size_t((length + 1) / 2 * head_dim));
  pairs.weights.resize(size_t(kKeyBlock / 2 * Q));
  pack_value_pairs(static_cast<const uint16_t*>(job.v), head_dim, length, pairs.values.data());
  Scratch& buffers = scratch();
  buffers.tile.resize(size_t(head_dim * Q + kKeyBlock * Q + Q));
  float* ot = buffers.tile.data();
  float* s = ot + head_dim * Q;
  float* sums = s + kKeyBlock * Q;
  const int64_t end = job.query_begin + job.queries;
  for (int64_t q0 = job.query_begin; q0 < end; q0 += Q) {
    const int64_t count = std::min<int64_t>(Q, end - q0);
    scores.start_tile(q0, count);
    std::fill(ot, ot + head_dim * Q, 0.0f);
    __m512 max[kQueryVectors], sum[kQueryVectors], alpha[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u) max[u] = _mm512_set1_ps(-INFINITY), sum[u] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < length; k0 += kKeyBlock) {
      const int64_t keys = std::min(kKeyBlock, length - k0);
      scores.score(k0, keys, s);
      softmax_pairs(s, keys, job.scale, max, sum, alpha, pairs.weights.data());
      const uint32_t* vp = pairs.values.data() + (k0 / 2) * head_dim;
      const int64_t key_pairs = (keys + 1) / 2;
      int64_t d = 0;
      for (; d + kDimTile <= head_dim; d += kDimTile)
        accumulate_values<kDimTile>(vp + d, head_dim, key_pairs, pairs.weights.data(), alpha, ot + d * Q);
      for (; d < head_dim; ++d)
        accumulate_values<1>(vp + d, head_dim, key_pairs, pairs.weights.data(), alpha, ot + d * Q);
    }
    for (int u = 0; u < kQueryVectors; ++u) _mm512_storeu_ps(sums + u * W, sum[u]);
    store_output(ot, sums, head_dim, count, Q, static_cast<uint16_t*>(job.out) + q0 * job.out_stride,
                 job.out_stride);
  }
}

}  // namespace

void attend_avx512_bf16(const Job& job) {
  thread_local PairScratch pairs;
  if (job.int8_scores) {
    Int8Scores<Avx512Ops> scores(job);
    attend_pairs(job, scores, pairs);
  } else {
    PairScores scores(job, pairs);
    attend_pairs(job, scores, pairs);
  }
}

}  // namespace qvl::kernels::attention_detail
