// Dispatch, threading, checks and the portable versions of the decode kernels
// (the generic and neon tiers). The portable code keeps the vector tiers'
// layout (ATen's sum order in the norms, 16 lanes of partial sums in the
// attention) in loops GCC vectorizes for the baseline ISA; it multiplies and
// adds separately where they use FMA, so its attention and SiLU may differ
// from theirs in the last bits.
#include "qvl/kernels/decode_ops.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/decode_ops_detail.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/simd_portable.h"

namespace qvl::kernels {

using namespace decode_detail;

namespace {

using namespace simd_portable;

// Below about this many values a second thread costs more than it saves.
constexpr int64_t kValuesPerThread = 1 << 15;

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kValuesPerThread / std::max<int64_t>(1, cols)); }

// ATen's sum order on W lanes held in an array (W = 1 is the order of one
// value at a time).
template <int W>
struct FloatLanes {
  struct V {
    float lane[W];
  };
  static constexpr int kWidth = W;
  static V zero() { return V{}; }
  static V add(V a, const V& b) {
    for (int l = 0; l < W; ++l) a.lane[l] += b.lane[l];
    return a;
  }
  template <class T>
  static V square(const T* p) {
    V v;
    for (int l = 0; l < W; ++l) {
      const float e = load(p, l);
      v.lane[l] = e * e;
    }
    return v;
  }
  static void store(float* p, const V& v) {
    for (int l = 0; l < W; ++l) p[l] = v.lane[l];
  }
};

template <class T>
float sum_of_squares(const T* x, int64_t n, int lanes) {
  // ATen adds rows shorter than a vector one value at a time.
  if (lanes == 16 && n >= 16) return cascade_sum_of_squares<FloatLanes<16>>(x, n);
  if (lanes == 8 && n >= 8) return cascade_sum_of_squares<FloatLanes<8>>(x, n);
  return cascade_sum_of_squares<FloatLanes<1>>(x, n);
}

template <class T>
void rms_norm_rows(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const int64_t cols = job.cols;
  const T* weight = static_cast<const T*>(job.weight);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* x = static_cast<const T*>(job.x) + r * cols;
    T* y = static_cast<T*>(job.y) + r * cols;
    const float sum = sum_of_squares(x, cols, job.lanes);
    const float inv_rms = 1.0f / std::sqrt(sum / float(cols) + job.eps);
    for (int64_t c = 0; c < cols; ++c) store(y, c, round_to(x, load(x, c) * inv_rms) * load(weight, c));
  }
}

template <class T>
void head_norm_rope_rows(const HeadRopeJob& job, int64_t row_begin, int64_t row_end) {
  const int64_t head_dim = job.head_dim, half = head_dim / 2;
  const T* weight = static_cast<const T*>(job.weight);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* x = static_cast<const T*>(job.x) + r * head_dim;
    T* y = static_cast<T*>(job.y) + r * head_dim;
    const float* cos = job.cos + (r / job.heads) * head_dim;
    const float* sin = job.sin + (r / job.heads) * head_dim;
    const float sum = sum_of_squares(x, head_dim, job.lanes);
    const float inv_rms = 1.0f / std::sqrt(sum / float(head_dim) + job.eps);
    const auto normed = [&](int64_t i) { return round_to(x, round_to(x, load(x, i) * inv_rms) * load(weight, i)); };
    for (int64_t i = 0; i < half; ++i) {  // reads i and half + i before writing them (y may be x)
      const float first = normed(i), second = normed(half + i);
      store(y, i, first * cos[i] - second * sin[i]);
      store(y, half + i, second * cos[half + i] + first * sin[half + i]);
    }
  }
}

// The vector tiers' layout with separate multiplies and adds: scores as 16
// lanes of partial dot products reduced pairwise, the softmax sum in 16 lanes
// by position, Σ p·v in float32 in position order.
template <class T>
void attend_pair(const AttentionJob& job, int64_t pair, float* scratch) {
  const int64_t kv_heads = job.shape.kv_heads, head_dim = job.shape.head_dim;
  const int64_t group = job.shape.heads / kv_heads;
  const int64_t chunks = (head_dim + kLanes - 1) / kLanes;
  const int64_t b = pair / kv_heads, g = pair % kv_heads;
  const KvSequence& seq = job.sequences[b];
  const int64_t visible = seq.visible;
  const T* keys = static_cast<const T*>(seq.keys) + g * seq.capacity * head_dim;
  const T* values = static_cast<const T*>(seq.values) + g * seq.capacity * head_dim;
  const int64_t first_row = (b * job.shape.heads + g * group) * head_dim;  // of q and out
  const T* q = static_cast<const T*>(job.q) + first_row;
  T* out = static_cast<T*>(job.out) + first_row;

  // Queries and each key as floats, zero past head_dim, so that every chunk
  // is a full one.
  const int64_t padded = chunks * kLanes;
  float query[kMaxGroup][kMaxHeadDim], key[kMaxHeadDim];
  for (int64_t d = head_dim; d < padded; ++d) key[d] = 0;
  for (int64_t h = 0; h < group; ++h)
    for (int64_t d = 0; d < padded; ++d) query[h][d] = d < head_dim ? load(q + h * head_dim, d) : 0.0f;
  for (int64_t t = 0; t < visible; ++t) {
    for (int64_t d = 0; d < head_dim; ++d) key[d] = load(keys + t * head_dim, d);
    for (int64_t h = 0; h < group; ++h) {
      float lanes[kLanes] = {};
      for (int64_t c = 0; c < padded; c += kLanes)
        for (int l = 0; l < kLanes; ++l) lanes[l] += query[h][c + l] * key[c + l];
      scratch[h * visible + t] = reduce_pairwise(lanes) * job.scale;
    }
  }

  const int64_t full = visible / kLanes * kLanes;
  for (int64_t h = 0; h < group; ++h) {
    float* scores = scratch + h * visible;
    float max_score = -INFINITY;
    {
      float maxima[kLanes];
      for (float& m : maxima) m = -INFINITY;
      for (int64_t t = 0; t < full; t += kLanes)
        for (int l = 0; l < kLanes; ++l) maxima[l] = max_of(maxima[l], scores[t + l]);
      for (int64_t t = full; t < visible; ++t) max_score = max_of(max_score, scores[t]);
      for (float m : maxima) max_score = max_of(max_score, m);
    }
    float sums[kLanes] = {};
    for (int64_t t = 0; t < full; t += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        scores[t + l] = exp_poly(scores[t + l] - max_score);
        sums[l] += scores[t + l];
      }
    for (int64_t t = full; t < visible; ++t) {
      scores[t] = exp_poly(scores[t] - max_score);
      sums[t - full] += scores[t];
    }
    const float inverse = 1.0f / reduce_pairwise(sums);
    for (int64_t t = 0; t < visible; ++t) scores[t] = round_to(values, scores[t] * inverse);
  }

  float acc[kMaxGroup][kMaxHeadDim];
  for (int64_t h = 0; h < group; ++h)
    for (int64_t d = 0; d < head_dim; ++d) acc[h][d] = 0;
  for (int64_t t = 0; t < visible; ++t) {
    const T* value = values + t * head_dim;
    for (int64_t h = 0; h < group; ++h) {
      const float p = scratch[h * visible + t];
      for (int64_t d = 0; d < head_dim; ++d) acc[h][d] += p * load(value, d);
    }
  }
  for (int64_t h = 0; h < group; ++h)
    for (int64_t d = 0; d < head_dim; ++d) store(out + h * head_dim, d, acc[h][d]);
}

template <class T>
void silu_mul_range(T* gate, const T* up, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = load(gate, i);
    const float silu = round_to(gate, g / (1.0f + exp_poly(0.0f - g)));
    store(gate, i, silu * load(up, i));
  }
}

void rms_norm_rows_portable(const NormJob& job, int64_t row_begin, int64_t row_end) {
  job.storage == Storage::F32 ? rms_norm_rows<float>(job, row_begin, row_end)
                              : rms_norm_rows<uint16_t>(job, row_begin, row_end);
}
void head_norm_rope_rows_portable(const HeadRopeJob& job, int64_t row_begin, int64_t row_end) {
  job.storage == Storage::F32 ? head_norm_rope_rows<float>(job, row_begin, row_end)
                              : head_norm_rope_rows<uint16_t>(job, row_begin, row_end);
}
void attend_pair_portable(const AttentionJob& job, int64_t pair, float* scratch) {
  job.storage == Storage::F32 ? attend_pair<float>(job, pair, scratch) : attend_pair<uint16_t>(job, pair, scratch);
}
void silu_mul_portable(Storage s, void* gate, const void* up, int64_t begin, int64_t end) {
  s == Storage::F32
      ? silu_mul_range(static_cast<float*>(gate), static_cast<const float*>(up), begin, end)
      : silu_mul_range(static_cast<uint16_t*>(gate), static_cast<const uint16_t*>(up), begin, end);
}
}  // namespace

namespace decode_detail {

const DecodeKernels kDecodePortable = {rms_norm_rows_portable, head_norm_rope_rows_portable, attend_pair_portable,
                                       silu_mul_portable};

const DecodeKernels& decode_kernels(Isa isa, const char* caller) {
  require_isa(isa, caller);
#if QVL_X86
  if (isa == Isa::Avx512) return kDecodeAvx512;
  if (runs_avx2_code(isa)) return kDecodeAvx2;
#endif
  return kDecodePortable;
}

}  // namespace decode_detail

namespace {

void require_sum_lanes(int sum_lanes, const char* caller) {
  if (sum_lanes != 1 && sum_lanes != 8 && sum_lanes != 16)
    throw Error(fmt::format("{}: a sum in vectors of {} lanes is not ATen's (1, 8 or 16)", caller, sum_lanes));
}

}  // namespace

float sum_of_squares_in_order(Storage s, const void* x, int64_t n, int sum_lanes) {
  require_sum_lanes(sum_lanes, "sum_of_squares_in_order");
  return s == Storage::F32 ? sum_of_squares(static_cast<const float*>(x), n, sum_lanes)
                           : sum_of_squares(static_cast<const uint16_t*>(x), n, sum_lanes);
}

void rms_norm_rows(Storage s, const void* x, const void* weight, void* y, int64_t rows, int64_t cols, double eps,
                   int sum_lanes, Isa isa) {
  const DecodeKernels& kernels = decode_kernels(isa, "rms_norm_rows");
  require_sum_lanes(sum_lanes, "rms_norm_rows");
  if (rows <= 0 || cols <= 0) return;
  // ATen adds eps to a float32 tensor: the double becomes a float first.
  const NormJob job{s, x, weight, y, cols, static_cast<float>(eps), sum_lanes};
  parallel_for(rows, row_grain(cols),
                   [&](int64_t begin, int64_t end) { kernels.rms_norm_rows(job, begin, end); });
}

void head_norm_rope(Storage s, const void* x, const void* weight, const float* cos, const float* sin, void* y,
                    int64_t tokens, int64_t heads, int64_t head_dim, double eps, int sum_lanes, Isa isa) {
  const DecodeKernels& kernels = decode_kernels(isa, "head_norm_rope");
  require_sum_lanes(sum_lanes, "head_norm_rope");
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw Error(fmt::format("head_norm_rope: rotary needs a positive even head_dim, got {}", head_dim));
  if (tokens <= 0 || heads <= 0) return;
  const HeadRopeJob job{s, x, weight, cos, sin, y, heads, head_dim, static_cast<float>(eps), sum_lanes};
  parallel_for(tokens * heads, row_grain(head_dim),
                   [&](int64_t begin, int64_t end) { kernels.head_norm_rope_rows(job, begin, end); });
}

namespace {

void check_attention_shape(const AttentionShape& shape, const char* what) {
  if (shape.kv_heads <= 0 || shape.heads <= 0 || shape.heads % shape.kv_heads != 0 ||
      shape.heads / shape.kv_heads > kMaxGroup)
    throw Error(fmt::format("{}: {} query heads cannot share {} kv heads (groups of at most {})", what, shape.heads,
                            shape.kv_heads, kMaxGroup));
  if (shape.head_dim <= 0 || shape.head_dim > kMaxHeadDim)
    throw Error(fmt::format("{}: head_dim {} is outside 1..{}", what, shape.head_dim, kMaxHeadDim));
}

// Runs kernels.attend_pair on every (sequence, kv head) pair, the threads
// taking contiguous pieces of [0, pairs) mapped through `pair_of`: one piece
// each (claim = 0), or pieces of `claim` pairs claimed in turn.
template <class PairOf>
void run_attention_pairs(const DecodeKernels& kernels, const AttentionJob& job, int64_t pairs, int64_t longest,
                         int64_t claim, PairOf pair_of) {
  const int64_t scratch_floats = job.shape.heads / job.shape.kv_heads * longest;
  const auto run = claim > 0 ? parallel_claim : parallel_for;
  run(pairs, claim > 0 ? claim : 1, [&](int64_t begin, int64_t end) {
    // Grown, never shrunk: a decode step after the first allocates nothing.
    thread_local std::vector<float> scratch;
    if (int64_t(scratch.size()) < scratch_floats) scratch.resize(size_t(scratch_floats));
    for (int64_t i = begin; i < end; ++i) kernels.attend_pair(job, pair_of(i), scratch.data());
  });
}

}  // namespace

void decode_attention(Storage s, const void* q, const KvSequence* sequences, int64_t batch,
                      const AttentionShape& shape, void* out, Isa isa) {
  const DecodeKernels& kernels = decode_kernels(isa, "decode_attention");
  if (batch <= 0) return;
  check_attention_shape(shape, "decode_attention");
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const KvSequence& seq = sequences[b];
    if (seq.keys == nullptr || seq.values == nullptr || seq.visible <= 0 || seq.visible > seq.capacity)
      throw Error(fmt::format("decode_attention: sequence {} has {} visible positions in a cache of {}{}", b,
                              seq.visible, seq.capacity, seq.keys && seq.values ? "" : " (no keys/values)"));
    longest = std::max(longest, seq.visible);
  }
  const AttentionJob job{s, q, sequences, shape, static_cast<float>(1.0 / std::sqrt(double(shape.head_dim))), out};
  run_attention_pairs(kernels, job, batch * shape.kv_heads, longest, 0, [](int64_t pair) { return pair; });
}

void causal_attention(Storage s, const void* q, const KvSequence& cache, int64_t n, const AttentionShape& shape,
                      void* out, Isa isa) {
  const DecodeKernels& kernels = decode_kernels(isa, "causal_attention");
  if (n <= 0) return;
  check_attention_shape(shape, "causal_attention");
  if (cache.keys == nullptr || cache.values == nullptr || cache.visible < n || cache.visible > cache.capacity)
    throw Error(fmt::format("causal_attention: {} new queries with {} visible positions in a cache of {}{}", n,
                            cache.visible, cache.capacity, cache.keys && cache.values ? "" : " (no keys/values)"));
  // Query i is a one-query sequence of its own that sees up to its position.
  std::vector<KvSequence> queries(size_t(n), cache);
  for (int64_t i = 0; i < n; ++i) queries[size_t(i)].visible = cache.visible - n + i + 1;
  const AttentionJob job{s, q, queries.data(), shape, static_cast<float>(1.0 / std::sqrt(double(shape.head_dim))),
                         out};
  const int64_t kv_heads = shape.kv_heads, scratch_floats = shape.heads / kv_heads * cache.visible;
  if (kernels.attend_two && shape.heads == 2 * kv_heads && shape.head_dim == 128) {
    // Queries two at a time (2u, 2u + 1: one pass over the keys and values
    // for both), the pairs in the order 0, last, 1, last - 1, ..., 2 at a
    // time (all their kv heads) claimed by the threads in turn: every piece
    // holds short and long ones alike, and a thread that loses its core
    // leaves the rest to the others.
    const int64_t units = (n + 1) / 2;
    parallel_claim(units * kv_heads, 2 * kv_heads, [&](int64_t begin, int64_t end) {
      thread_local std::vector<float> scratch;
      if (int64_t(scratch.size()) < 2 * scratch_floats) scratch.resize(size_t(2 * scratch_floats));
      for (int64_t i = begin; i < end; ++i) {
        const int64_t j = i / kv_heads, u = j % 2 == 0 ? j / 2 : units - 1 - j / 2, g = i % kv_heads;
        if (2 * u + 1 < n)
          kernels.attend_two(job, 2 * u, g, scratch.data());
        else
          kernels.attend_pair(job, 2 * u * kv_heads + g, scratch.data());
      }
    });
    return;
  }
  // Otherwise one query at a time, in the same order, 4 at a time.
  run_attention_pairs(kernels, job, n * kv_heads, cache.visible, 4 * kv_heads, [n, kv_heads](int64_t i) {
    const int64_t j = i / kv_heads, b = j % 2 == 0 ? j / 2 : n - 1 - j / 2;
    return b * kv_heads + i % kv_heads;
  });
}

void silu_mul(Storage s, void* gate, const void* up, int64_t n, Isa isa) {
  const DecodeKernels& kernels = decode_kernels(isa, "silu_mul");
  if (n <= 0) return;
  parallel_for(n, kValuesPerThread,
                   [&](int64_t begin, int64_t end) { kernels.silu_mul(s, gate, up, begin, end); });
}

}  // namespace qvl::kernels
