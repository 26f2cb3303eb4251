// Internal to the attention kernel (attention.h): the per-tier entry points,
// and the float32 algorithm every tier runs on its own vector type. Included
// by attention.cpp (portable) and the per-tier files; everything sits in an
// unnamed namespace so no copy compiled with AVX-512 is ever the one the
// linker keeps for another file.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "qvl/kernels/attention.h"
#include "qvl/kernels/simd_portable.h"

namespace qvl::kernels::attention_detail {

// A block's work, checked and with its pointers at the head's first token.
struct Job {
  const void* q;  // row i: query i of the sequence, in this head
  const void* k;
  const void* v;
  void* out;       // row i at out + i * out_stride: query i's output in this head
  int64_t out_stride;
  int64_t head_dim, length, query_begin, queries;
  float scale;
  Storage storage;  // of q, k, v and out
  bool int8_scores;  // AttentionScores::Int8
};

// The job of a checked block (attend_block's checks; tests call the tiers'
// entry points below with it).
Job make_job(Storage s, const AttentionTensors& t, const AttentionBlock& b, float scale);

// The avx512 tier's two versions: float32 FMA (f32 storage, or bf16 on CPUs
// without AVX512-BF16) and vdpbf16ps (bf16 storage, even head_dim or int8
// scores). With int8 scores the avx512 versions need AVX512-VNNI (without it
// the avx2 version runs: AVX-512BW has no byte sign instruction).
#if QVL_X86
void attend_avx2(const Job& job);
// The avx2 kernel with int8 scores through a 256-bit vpdpbusd (the avx2-vnni tier).
void attend_avx2_vnni(const Job& job);
void attend_avx512(const Job& job);
void attend_avx512_bf16(const Job& job);  // entered only with AVX512-BF16
#endif
void attend_portable(const Job& job);
#if defined(__aarch64__)
// The portable kernel with int8 scores through sdot (score_int8_neon_dotprod).
void attend_neon_dotprod(const Job& job);
#endif

// The int8 scores' operands (attention.h, AttentionScores::Int8). Rows of q
// or k quantized, each padded with zeros to whole steps of 4 dims (vpdpbusd's
// unit: 4 byte products into one int32), with each row's scale and the sum of
// its values (the VNNI kernel's correction).
struct Int8RowsView {
  const int8_t* values;  // row i at values + i * padded_dim
  const float* scales;
  const int32_t* sums;
  int64_t padded_dim;
};
// A tile of queries laid out for the kernels: per step of 4 dims, the tile's
// queries side by side, 4 bytes each (values[(step · tile + lane) · 4 + b] is
// dim 4·step + b of query lane), and their scales; 0 past the last query.
struct Int8TileView {
  int8_t* values;
  float* scales;
};
struct Int8Operands {
  Int8RowsView keys;     // the job's keys, rows 0..length
  Int8RowsView queries;  // the job's queries, row i = query query_begin + i
  Int8TileView tile;     // filled by pack_query_tile_int8
};

// `rows` rows of head_dim values of storage s (row-major) quantized as
// attention.h says: per row, value = round-half-even(x · (127 / max|x|))
// clamped to ±127 (0 for a row of zeros), scale = max|x| / 127. Row r's
// values go to values + r · padded_dim (zero past head_dim), its scale and
// the sum of its values to scales[r] and sums[r]. A maximum, one division per
// row, a product and a rounding: each tier's version gives the same bytes.
using QuantizeRows = void (*)(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                              int8_t* values, float* scales, int32_t* sums);
void quantize_rows_portable(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                            int8_t* values, float* scales, int32_t* sums);
#if QVL_X86
void quantize_rows_avx2(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                        int8_t* values, float* scales, int32_t* sums);
void quantize_rows_avx512(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                          int8_t* values, float* scales, int32_t* sums);  // in the VNNI kernel's file
#endif

// Quantizes the job's keys and queries with `quantize` into the calling
// thread's buffers (reused from job to job) and makes room for a tile of
// `tile` queries.
Int8Operands prepare_int8_scores(const Job& job, int tile, QuantizeRows quantize);
// The tile of queries [first, first + count) of the job (relative to
// query_begin) into op.tile.
void pack_query_tile_int8(const Int8Operands& op, int64_t first, int64_t count, int tile);

// s[j][lane] = float(Σ_d q[lane][d] · k[first + j][d]) · (q_scale[lane] ·
// k_scale[first + j]) for j < keys, over the packed tile: the dot products in
// int32, exact; the product of the scales, then the product with the dot,
// each rounded once, so every tier gives the same floats. Tiles: portable
// any (fast for its own, 8), avx2 16, avx512 32.
void score_int8_portable(const Int8Operands& op, int64_t first, int64_t keys, int tile, float* s);
#if QVL_X86
void score_int8_avx2(const Int8Operands& op, int64_t first, int64_t keys, float* s);
void score_int8_avx512_vnni(const Int8Operands& op, int64_t first, int64_t keys, float* s);  // with AVX512-VNNI
// The avx2-vnni tier's (tile 16, as avx2): int8_avx_vnni.cpp with AVX-VNNI,
// int8_avx_vnni_evex.cpp with AVX512-VNNI+VL.
void score_int8_avx_vnni(const Int8Operands& op, int64_t first, int64_t keys, float* s);
void score_int8_avx_vnni_evex(const Int8Operands& op, int64_t first, int64_t keys, float* s);
#endif
#if defined(__aarch64__)
// The neon tier's on CPUs with the dot-product extension (tile 8, as portable;
// int8_neon_dotprod.cpp).
void score_int8_neon_dotprod(const Int8Operands& op, int64_t first, int64_t keys, float* s);
#endif

namespace {

// The storage's values as floats: the array itself for float32, else widened
// into `buffer`.
inline const float* as_floats(const float* p, int64_t, std::vector<float>&) { return p; }
inline const float* as_floats(const uint16_t* p, int64_t n, std::vector<float>& buffer) {
  buffer.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) buffer[size_t(i)] = simd_portable::widen_bf16(p[i]);
  return buffer.data();
}

// Ops: a tier's vector of kWidth floats (Vec) and its operations, and its
// tiles: kQueryVectors vectors of queries, kKeyBlock keys per block (its
// scores and values stay in L1 beside the query tile; even, so a block never
// splits a pair of keys, the bf16 kernel's unit), and in registers kKeyTile
// keys scored or kDimTile output dims accumulated at once.
template <class Ops>
struct Tile {
  using V = typename Ops::Vec;
  static constexpr int W = Ops::kWidth;
  static constexpr int kQueryVectors = Ops::kQueryVectors;
  static constexpr int Q = W * kQueryVectors;  // queries per tile

  // s[j][lane] = Σ_d k[j][d] · qt[d][lane] for the J keys from k.
  template <int J>
  static void score_keys(const float* k, int64_t head_dim, const float* qt, float* s) {
    V acc[J][kQueryVectors];
    for (auto& row : acc)
      for (V& a : row) a = Ops::zero();
    for (int64_t d = 0; d < head_dim; ++d) {
      V query[kQueryVectors];
      for (int u = 0; u < kQueryVectors; ++u) query[u] = Ops::load(qt + d * Q + u * W);
      for (int j = 0; j < J; ++j) {
        const V key = Ops::set1(k[j * head_dim + d]);
        for (int u = 0; u < kQueryVectors; ++u) acc[j][u] = Ops::fma(query[u], key, acc[j][u]);
      }
    }
    for (int j = 0; j < J; ++j)
      for (int u = 0; u < kQueryVectors; ++u) Ops::store(s + j * Q + u * W, acc[j][u]);
  }

  // The block's scores s[keys][Q] become their softmax terms
  // round(exp((s - max) · scale)) against the new running maximum; `alpha`
  // gets exp((old max - new max) · scale), by which the earlier sum and
  // outputs shrink, and sum = sum · alpha + the block's terms.
  template <class Round>
  static void softmax_block(float* s, int64_t keys, float scale, V* max, V* sum, V* alpha, Round round) {
    V block_max[kQueryVectors];
    for (V& m : block_max) m = Ops::set1(-INFINITY);
    for (int64_t j = 0; j < keys; ++j)
      for (int u = 0; u < kQueryVectors; ++u) block_max[u] = Ops::max(block_max[u], Ops::load(s + j * Q + u * W));
    const V scale_v = Ops::set1(scale);
    for (int u = 0; u < kQueryVectors; ++u) {
      const V new_max = Ops::max(max[u], block_max[u]);
      alpha[u] = Ops::exp(Ops::mul(Ops::sub(max[u], new_max), scale_v));
      max[u] = new_max;
    }
    // The block's terms summed on their own first: a short sum, added once.
    V block_sum[kQueryVectors];
    for (V& b : block_sum) b = Ops::zero();
    for (int64_t j = 0; j < keys; ++j)
      for (int u = 0; u < kQueryVectors; ++u) {
        const V p = round(Ops::exp(Ops::mul(Ops::sub(Ops::load(s + j * Q + u * W), max[u]), scale_v)));
        Ops::store(s + j * Q + u * W, p);
        block_sum[u] = Ops::add(block_sum[u], p);
      }
    for (int u = 0; u < kQueryVectors; ++u) sum[u] = Ops::add(Ops::mul(sum[u], alpha[u]), block_sum[u]);
  }

  // ot[d][lane] = ot[d][lane] · alpha + Σ_j p[j][lane] · v[j][d] for the D
  // dims from v (row j at v + j * head_dim) and ot.
  template <int D>
  static void accumulate_values(const float* v, int64_t head_dim, int64_t keys, const float* p, const V* alpha,
                                float* ot) {
    V acc[D][kQueryVectors];
    for (int d = 0; d < D; ++d)
      for (int u = 0; u < kQueryVectors; ++u) acc[d][u] = Ops::mul(Ops::load(ot + d * Q + u * W), alpha[u]);
    for (int64_t j = 0; j < keys; ++j) {
      V weight[kQueryVectors];
      for (int u = 0; u < kQueryVectors; ++u) weight[u] = Ops::load(p + j * Q + u * W);
      for (int d = 0; d < D; ++d) {
        const V value = Ops::set1(v[j * head_dim + d]);
        for (int u = 0; u < kQueryVectors; ++u) acc[d][u] = Ops::fma(weight[u], value, acc[d][u]);
      }
    }
    for (int d = 0; d < D; ++d)
      for (int u = 0; u < kQueryVectors; ++u) Ops::store(ot + d * Q + u * W, acc[d][u]);
  }
};

// Per thread, reused from block to block (a task's buffers would otherwise be
// fresh pages every time).
struct Scratch {
  std::vector<float> keys, values, queries, tile;
};
inline Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// The transposed query tile qt[d][lane] as floats (zero past the last query).
template <class T>
void load_query_tile(const T* q, int64_t head_dim, int64_t first, int64_t count, int tile, float* qt) {
  std::fill(qt, qt + head_dim * tile, 0.0f);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t d = 0; d < head_dim; ++d) qt[d * tile + i] = simd_portable::load(q, (first + i) * head_dim + d);
}

// out row i = ot[.][i] / sum[i] for the tile's queries, rounded to T.
template <class T>
void store_output(const float* ot, const float* sums, int64_t head_dim, int64_t count, int tile, T* out,
                  int64_t out_stride) {
  for (int64_t i = 0; i < count; ++i) {
    const float inverse = 1.0f / sums[i];
    for (int64_t d = 0; d < head_dim; ++d) simd_portable::store(out + i * out_stride, d, ot[d * tile + i] * inverse);
  }
}

// The scores of a block of keys against a tile of queries, two ways (the
// float32 kernel below and the avx512 bf16 kernel take either): start_tile
// when a tile of queries begins, score for each block of keys.

// Float: the stored q and k in float32 on Ops' vectors (the keys widened once
// per job, a tile of queries transposed when it starts).
template <class Ops, class T>
class FloatScores {
 public:
  static constexpr int Q = Tile<Ops>::Q;
  FloatScores(const Job& job, Scratch& buffers)
      : q_(static_cast<const T*>(job.q)),
        k_(as_floats(static_cast<const T*>(job.k), job.length * job.head_dim, buffers.keys)),
        head_dim_(job.head_dim) {
    buffers.queries.resize(size_t(head_dim_ * Q));
    qt_ = buffers.queries.data();
  }
  void start_tile(int64_t first, int64_t count) { load_query_tile(q_, head_dim_, first, count, Q, qt_); }
  // s[j][lane] for the keys [k0, k0 + keys).
  void score(int64_t k0, int64_t keys, float* s) const {
    int64_t j = 0;
    for (; j + Ops::kKeyTile <= keys; j += Ops::kKeyTile)
      Tile<Ops>::template score_keys<Ops::kKeyTile>(k_ + (k0 + j) * head_dim_, head_dim_, qt_, s + j * Q);
    for (; j < keys; ++j) Tile<Ops>::template score_keys<1>(k_ + (k0 + j) * head_dim_, head_dim_, qt_, s + j * Q);
  }

 private:
  const T* q_;
  const float* k_;
  int64_t head_dim_;
  float* qt_;
};

// Int8 (AttentionScores::Int8): the job's keys and queries quantized once
// (Ops::quantize), a tile packed when it starts, the tier's integer kernel
// (Ops::score_int8).
template <class Ops>
class Int8Scores {
 public:
  static constexpr int Q = Tile<Ops>::Q;
  explicit Int8Scores(const Job& job) : op_(prepare_int8_scores(job, Q, Ops::quantize)), query_begin_(job.query_begin) {}
  void start_tile(int64_t first, int64_t count) { pack_query_tile_int8(op_, first - query_begin_, count, Q); }
  void score(int64_t k0, int64_t keys, float* s) const { Ops::score_int8(op_, k0, keys, s); }

 private:
  Int8Operands op_;
  int64_t query_begin_;
};

// The whole block on Ops' vectors: scores from `scores`, softmax and the
// weighted sum of the values in float32.
template <class Ops, class T, class Scores>
void attend_with(const Job& job, Scores& scores, Scratch& buffers) {
  using TileOps = Tile<Ops>;
  using V = typename Ops::Vec;
  constexpr int W = Ops::kWidth, Q = TileOps::Q, kQueryVectors = Ops::kQueryVectors;
  constexpr int64_t kKeyBlock = Ops::kKeyBlock;
  const int64_t head_dim = job.head_dim, length = job.length;
  const float* v = as_floats(static_cast<const T*>(job.v), length * head_dim, buffers.values);
  buffers.tile.resize(size_t(head_dim * Q + kKeyBlock * Q + Q));
  float* ot = buffers.tile.data();
  float* s = ot + head_dim * Q;
  float* sums = s + kKeyBlock * Q;
  const auto keep = [](V x) { return x; };
  const int64_t end = job.query_begin + job.queries;
  for (int64_t q0 = job.query_begin; q0 < end; q0 += Q) {
    const int64_t count = std::min<int64_t>(Q, end - q0);
    scores.start_tile(q0, count);
    std::fill(ot, ot + head_dim * Q, 0.0f);
    V max[kQueryVectors], sum[kQueryVectors], alpha[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u) max[u] = Ops::set1(-INFINITY), sum[u] = Ops::zero();
    for (int64_t k0 = 0; k0 < length; k0 += kKeyBlock) {
      const int64_t keys = std::min(kKeyBlock, length - k0);
      scores.score(k0, keys, s);
      TileOps::softmax_block(s, keys, job.scale, max, sum, alpha, keep);
      int64_t d = 0;
      for (; d + Ops::kDimTile <= head_dim; d += Ops::kDimTile)
        TileOps::template accumulate_values<Ops::kDimTile>(v + k0 * head_dim + d, head_dim, keys, s, alpha,
                                                           ot + d * Q);
      for (; d < head_dim; ++d)
        TileOps::template accumulate_values<1>(v + k0 * head_dim + d, head_dim, keys, s, alpha, ot + d * Q);
    }
    for (int u = 0; u < kQueryVectors; ++u) Ops::store(sums + u * W, sum[u]);
    store_output(ot, sums, head_dim, count, Q, static_cast<T*>(job.out) + q0 * job.out_stride, job.out_stride);
  }
}

// The whole block in float32 on Ops' vectors (the scores as the job says).
template <class Ops, class T>
void attend_f32(const Job& job) {
  Scratch& buffers = scratch();
  if (job.int8_scores) {
    Int8Scores<Ops> scores(job);
    attend_with<Ops, T>(job, scores, buffers);
  } else {
    FloatScores<Ops, T> scores(job, buffers);
    attend_with<Ops, T>(job, scores, buffers);
  }
}

}  // namespace
}  // namespace qvl::kernels::attention_detail
