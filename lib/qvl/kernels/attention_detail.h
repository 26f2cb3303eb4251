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
};

// The job of a checked block (attend_block's checks; tests call the tiers'
// entry points below with it).
Job make_job(Storage s, const AttentionTensors& t, const AttentionBlock& b, float scale);

// The avx512 tier's two versions: float32 FMA (f32 storage, or bf16 on CPUs
// without AVX512-BF16) and vdpbf16ps (bf16 storage, even head_dim).
#if QVL_X86
void attend_avx2(Storage s, const Job& job);
void attend_avx512(Storage s, const Job& job);
void attend_avx512_bf16(Storage s, const Job& job);  // entered only with AVX512-BF16
#endif
void attend_portable(Storage s, const Job& job);


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
  std::vector<float> keys, values, tile;
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

// The whole block in float32 on Ops' vectors.
template <class Ops, class T>
void attend_f32(const Job& job) {
  using TileOps = Tile<Ops>;
  using V = typename Ops::Vec;
  constexpr int W = Ops::kWidth, Q = TileOps::Q, kQueryVectors = Ops::kQueryVectors;
  constexpr int64_t kKeyBlock = Ops::kKeyBlock;
  const int64_t head_dim = job.head_dim, length = job.length;
  Scratch& buffers = scratch();
  const float* k = as_floats(static_cast<const T*>(job.k), length * head_dim, buffers.keys);
  const float* v = as_floats(static_cast<const T*>(job.v), length * head_dim, buffers.values);
  buffers.tile.resize(size_t(2 * head_dim * Q + kKeyBlock * Q + Q));
  float* qt = buffers.tile.data();
  float* ot = qt + head_dim * Q;
  float* s = ot + head_dim * Q;
  float* sums = s + kKeyBlock * Q;
  const auto keep = [](V x) { return x; };
  const int64_t end = job.query_begin + job.queries;
  for (int64_t q0 = job.query_begin; q0 < end; q0 += Q) {
    const int64_t count = std::min<int64_t>(Q, end - q0);
    load_query_tile(static_cast<const T*>(job.q), head_dim, q0, count, Q, qt);
    std::fill(ot, ot + head_dim * Q, 0.0f);
    V max[kQueryVectors], sum[kQueryVectors], alpha[kQueryVectors];
    for (int u = 0; u < kQueryVectors; ++u) max[u] = Ops::set1(-INFINITY), sum[u] = Ops::zero();
    for (int64_t k0 = 0; k0 < length; k0 += kKeyBlock) {
      const int64_t keys = std::min(kKeyBlock, length - k0);
      int64_t j = 0;
      for (; j + Ops::kKeyTile <= keys; j += Ops::kKeyTile)
        TileOps::template score_keys<Ops::kKeyTile>(k + (k0 + j) * head_dim, head_dim, qt, s + j * Q);
      for (; j < keys; ++j) TileOps::template score_keys<1>(k + (k0 + j) * head_dim, head_dim, qt, s + j * Q);
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

}  // namespace
}  // namespace qvl::kernels::attention_detail
