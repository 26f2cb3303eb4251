// AVX2 versions of the decode kernels: the avx2 tier's table. This file alone
// of them is compiled with -mavx2 -mfma (lib/CMakeLists.txt) and is only
// entered when that tier is active; everything in it has internal linkage or
// lives in decode_detail.
//
// Lane for lane the arithmetic of decode_ops_avx512.cpp, so both tiers give
// the same bits: ATen's sum order in the norms (16 lanes as a register pair
// when ATen sums in 16), and in the attention the 16-lane dot products,
// softmax sum and reduction order, with FMA where that file uses it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "qvl/kernels/decode_ops_detail.h"
#include "qvl/kernels/decode_ops_simd.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::decode_detail {
namespace {

using namespace simd_avx2;

// ATen's sum order (see sum_of_squares_in_order) on vectors of 16 lanes.
struct Lanes16 {
  using V = F32x16;
  static constexpr int kWidth = 16;
  static V zero() { return zero16(); }
  static V add(V a, V b) { return simd_avx2::add(a, b); }
  template <class T>
  static V square(const T* p) {
    const __m256 lo = load(p), hi = load(p + kLanes);
    return {_mm256_mul_ps(lo, lo), _mm256_mul_ps(hi, hi)};
  }
  static void store(float* p, V v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + kLanes, v.hi);
  }
};

template <class T>
float sum_of_squares(const T* x, int64_t n, int lanes) {
  return vector_sum_of_squares<Lanes16>(x, n, lanes);
}

template <class T>
void rms_norm_rows(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const int64_t cols = job.cols;
  const T* weight = static_cast<const T*>(job.weight);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* x = static_cast<const T*>(job.x) + r * cols;
    T* y = static_cast<T*>(job.y) + r * cols;
    const float sum = sum_of_squares(x, cols, job.lanes);
    const __m256 inv_rms = _mm256_set1_ps(1.0f / std::sqrt(sum / float(cols) + job.eps));
    for_each_vector(0, cols, [&](int64_t c, int64_t n) {
      const __m256 normed = round_to(x, _mm256_mul_ps(load(x + c, n), inv_rms));
      store(y + c, _mm256_mul_ps(normed, load(weight + c, n)), n);
    });
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
    const __m256 inv_rms = _mm256_set1_ps(1.0f / std::sqrt(sum / float(head_dim) + job.eps));
    const auto normed = [&](int64_t i, int64_t n) {
      return round_to(x, _mm256_mul_ps(round_to(x, _mm256_mul_ps(load(x + i, n), inv_rms)), load(weight + i, n)));
    };
    for_each_vector(0, half, [&](int64_t c, int64_t n) {
      const __m256 first = normed(c, n), second = normed(half + c, n);
      store(y + c, _mm256_sub_ps(_mm256_mul_ps(first, load(cos + c, n)), _mm256_mul_ps(second, load(sin + c, n))), n);
      store(y + half + c,
            _mm256_add_ps(_mm256_mul_ps(second, load(cos + half + c, n)), _mm256_mul_ps(first, load(sin + half + c, n))),
            n);
    });
  }
}

constexpr int64_t kPrefetchBytes = 8192;
constexpr int kChunk = 16;  // dims per dot-product chunk: the avx512 tier's register

// kGroup/kChunks fixed at compile time let GCC unroll the Qwen3-VL shape (2
// query heads per kv head, head_dim 128 = 8 full chunks); 0 means "read from
// job".
template <class T, int kGroup, int kChunks>
void attend_pair(const AttentionJob& job, int64_t pair, float* scratch) {
  constexpr int kGroupSlots = kGroup ? kGroup : int(kMaxGroup);
  const int64_t kv_heads = job.shape.kv_heads, head_dim = job.shape.head_dim;
  const int group = kGroup ? kGroup : int(job.shape.heads / kv_heads);
  const int chunks = kChunks ? kChunks : int((head_dim + kChunk - 1) / kChunk);
  const int64_t b = pair / kv_heads, g = pair % kv_heads;
  const KvSequence& seq = job.sequences[b];
  const int64_t visible = seq.visible;
  const T* keys = static_cast<const T*>(seq.keys) + g * seq.capacity * head_dim;
  const T* values = static_cast<const T*>(seq.values) + g * seq.capacity * head_dim;
  const int64_t first_row = (b * job.shape.heads + g * group) * head_dim;  // of q and out
  const T* q = static_cast<const T*>(job.q) + first_row;
  T* out = static_cast<T*>(job.out) + first_row;

  // The queries as floats, zero past head_dim, read from L1 by the dot loop
  // (in registers they would take 32 of AVX2's 16).
  alignas(32) float query[kGroupSlots][kMaxHeadDim];
  for (int h = 0; h < group; ++h)
    for (int64_t d = 0; d < chunks * kChunk; d += kLanes) store(query[h] + d, load(q + h * head_dim + d, head_dim - d));

  // See decode_ops_avx512.cpp: rows a few KiB ahead keep memory busy.
  const int64_t ahead = kPrefetchBytes / int64_t(sizeof(T) * head_dim) + 1;
  for (int64_t t = 0; t < visible; ++t) {
    const T* key = keys + t * head_dim;
    prefetch_range(key + ahead * head_dim, head_dim);
    F32x16 dot[kGroupSlots];
    for (int h = 0; h < group; ++h) dot[h] = zero16();
    for (int c = 0; c < chunks; ++c) {
      const F32x16 k = kChunks ? F32x16{load(key + c * kChunk), load(key + c * kChunk + kLanes)}
                               : load16(key + c * kChunk, head_dim - c * kChunk);
      for (int h = 0; h < group; ++h) {
        dot[h].lo = _mm256_fmadd_ps(_mm256_load_ps(query[h] + c * kChunk), k.lo, dot[h].lo);
        dot[h].hi = _mm256_fmadd_ps(_mm256_load_ps(query[h] + c * kChunk + kLanes), k.hi, dot[h].hi);
      }
    }
    for (int h = 0; h < group; ++h) scratch[h * visible + t] = reduce_pairwise(dot[h]) * job.scale;
  }

  for (int h = 0; h < group; ++h) {
    float* scores = scratch + h * visible;
    // The maximum is exact in any order.
    __m256 max_v = _mm256_set1_ps(-INFINITY);
    int64_t t = 0;
    for (; t + kLanes <= visible; t += kLanes) max_v = _mm256_max_ps(max_v, _mm256_loadu_ps(scores + t));
    float max_score = reduce_max(max_v);
    for (; t < visible; ++t) max_score = std::max(max_score, scores[t]);
    const __m256 max_all = _mm256_set1_ps(max_score);
    F32x16 sum = zero16();
    for (t = 0; t < visible; t += kChunk) {
      const int64_t left = visible - t;
      const __m256 lo = keep_first(exp_poly(_mm256_sub_ps(load(scores + t, left), max_all)), left);
      const __m256 hi = keep_first(exp_poly(_mm256_sub_ps(load(scores + t + kLanes, left - kLanes), max_all)), left - kLanes);
      sum = add(sum, F32x16{lo, hi});
      store(scores + t, lo, left);
      store(scores + t + kLanes, hi, left - kLanes);
    }
    const __m256 inverse = _mm256_set1_ps(1.0f / reduce_pairwise(sum));
    for_each_vector(0, visible, [&](int64_t i, int64_t n) {
      store(scores + i, round_to(values, _mm256_mul_ps(load(scores + i, n), inverse)), n);
    });
  }

  // Σ_t p_t·v_t, every output lane adding in position order as the avx512
  // tier does. Its sums for 2 heads over 128 dims would take 32 registers
  // where AVX2 has 16: they live in L1 instead, which keeps each value row
  // read once, in order, as that tier reads it. (Register-held sums over
  // 32-dim slices, rows taken in blocks, were no faster with the cache in L3
  // and up to 2x slower streaming it from memory, the common case.)
  alignas(32) float sums[kGroupSlots][kMaxHeadDim];
  const int64_t padded = int64_t(chunks) * kChunk;
  for (int h = 0; h < group; ++h)
    for (int64_t d = 0; d < padded; d += kLanes) _mm256_store_ps(sums[h] + d, _mm256_setzero_ps());
  for (int64_t t = 0; t < visible; ++t) {
    const T* value = values + t * head_dim;
    prefetch_range(value + ahead * head_dim, head_dim);
    __m256 p[kGroupSlots];
    for (int h = 0; h < group; ++h) p[h] = _mm256_set1_ps(scratch[h * visible + t]);
    for (int64_t d = 0; d < padded; d += kLanes) {
      const __m256 v = kChunks ? load(value + d) : load(value + d, head_dim - d);
      for (int h = 0; h < group; ++h)
        _mm256_store_ps(sums[h] + d, _mm256_fmadd_ps(p[h], v, _mm256_load_ps(sums[h] + d)));
    }
  }
  for (int h = 0; h < group; ++h)
    for (int64_t d = 0; d < head_dim; d += kLanes) store(out + h * head_dim + d, _mm256_load_ps(sums[h] + d), head_dim - d);
}

template <class T>
void attend_pair_dispatch(const AttentionJob& job, int64_t pair, float* scratch) {
  // A fixed kChunks means head_dim is exactly kChunks · 16 (no partial chunk).
  if (job.shape.heads == 2 * job.shape.kv_heads && job.shape.head_dim == 128)
    attend_pair<T, 2, 8>(job, pair, scratch);
  else
    attend_pair<T, 0, 0>(job, pair, scratch);
}

template <class T>
void silu_mul_range(T* gate, const T* up, int64_t begin, int64_t end) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for_each_vector(begin, end, [&](int64_t i, int64_t n) {
    const __m256 g = load(gate + i, n);
    const __m256 e = exp_poly(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = round_to(gate, _mm256_div_ps(g, _mm256_add_ps(one, e)));
    store(gate + i, _mm256_mul_ps(silu, load(up + i, n)), n);
  });
}

void rms_norm_rows_tier(const NormJob& job, int64_t row_begin, int64_t row_end) {
  job.storage == Storage::F32 ? rms_norm_rows<float>(job, row_begin, row_end)
                              : rms_norm_rows<uint16_t>(job, row_begin, row_end);
}
void head_norm_rope_rows_tier(const HeadRopeJob& job, int64_t row_begin, int64_t row_end) {
  job.storage == Storage::F32 ? head_norm_rope_rows<float>(job, row_begin, row_end)
                              : head_norm_rope_rows<uint16_t>(job, row_begin, row_end);
}
void attend_pair_tier(const AttentionJob& job, int64_t pair, float* scratch) {
  job.storage == Storage::F32 ? attend_pair_dispatch<float>(job, pair, scratch)
                              : attend_pair_dispatch<uint16_t>(job, pair, scratch);
}
void silu_mul_tier(Storage s, void* gate, const void* up, int64_t begin, int64_t end) {
  s == Storage::F32
      ? silu_mul_range(static_cast<float*>(gate), static_cast<const float*>(up), begin, end)
      : silu_mul_range(static_cast<uint16_t*>(gate), static_cast<const uint16_t*>(up), begin, end);
}

}  // namespace

const DecodeKernels kDecodeAvx2 = {rms_norm_rows_tier, head_norm_rope_rows_tier, attend_pair_tier, silu_mul_tier};

}  // namespace qvl::kernels::decode_detail
