// AVX-512 versions of the decode kernels: the avx512 tier's table. This file
// alone of them is compiled with -mavx512* (lib/CMakeLists.txt) and is only
// entered when that tier is active; everything in it has internal linkage or
// lives in decode_detail.
#include <immintrin.h>

#include <cmath>

#include "qvl/kernels/decode_ops_detail.h"
#include "qvl/kernels/decode_ops_simd.h"
#include "qvl/kernels/simd_avx512.h"

namespace qvl::kernels::decode_detail {
namespace {

using namespace simd_avx512;

// ATen's sum order (see sum_of_squares_in_order) on vectors of 16 lanes.
struct Lanes16 {
  using V = __m512;
  static constexpr int kWidth = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V square(const float* p) {
    const V v = _mm512_loadu_ps(p);
    return _mm512_mul_ps(v, v);
  }
  static V square(const uint16_t* p) {
    const V v = load(p, 0xffff);
    return _mm512_mul_ps(v, v);
  }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
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
    const __m512 inv_rms = _mm512_set1_ps(1.0f / std::sqrt(sum / float(cols) + job.eps));
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      const __m512 normed = round_to(x, _mm512_mul_ps(load(x + c, m), inv_rms));
      store(y + c, _mm512_mul_ps(normed, load(weight + c, m)), m);
    }
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
    const __m512 inv_rms = _mm512_set1_ps(1.0f / std::sqrt(sum / float(head_dim) + job.eps));
    const auto normed = [&](int64_t i, __mmask16 m) {
      return round_to(x, _mm512_mul_ps(round_to(x, _mm512_mul_ps(load(x + i, m), inv_rms)), load(weight + i, m)));
    };
    for (int64_t c = 0; c < half; c += kLanes) {
      const __mmask16 m = tail_mask(half - c);
      const __m512 first = normed(c, m), second = normed(half + c, m);
      store(y + c, _mm512_sub_ps(_mm512_mul_ps(first, load(cos + c, m)), _mm512_mul_ps(second, load(sin + c, m))), m);
      store(y + half + c,
            _mm512_add_ps(_mm512_mul_ps(second, load(cos + half + c, m)), _mm512_mul_ps(first, load(sin + half + c, m))),
            m);
    }
  }
}

constexpr int64_t kPrefetchBytes = 8192;

// scores[0, visible) → their softmax, rounded as values' type rounds (bf16
// probabilities before Σ p·v, as layer.cpp's probs.to(values dtype)).
template <class T>
void softmax_in_place(float* scores, int64_t visible, const T* values) {
  __m512 max_v = _mm512_set1_ps(-INFINITY);
  for (int64_t t = 0; t < visible; t += kLanes) {
    const __mmask16 m = tail_mask(visible - t);
    max_v = _mm512_mask_max_ps(max_v, m, max_v, _mm512_maskz_loadu_ps(m, scores + t));
  }
  const __m512 max_all = _mm512_set1_ps(_mm512_reduce_max_ps(max_v));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t = 0; t < visible; t += kLanes) {
    const __mmask16 m = tail_mask(visible - t);
    const __m512 e = exp_poly(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), max_all));
    sum = _mm512_mask_add_ps(sum, m, sum, e);
    _mm512_mask_storeu_ps(scores + t, m, e);
  }
  const __m512 inverse = _mm512_set1_ps(1.0f / reduce_pairwise(sum));
  for (int64_t t = 0; t < visible; t += kLanes) {
    const __mmask16 m = tail_mask(visible - t);
    _mm512_mask_storeu_ps(scores + t, m, round_to(values, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, scores + t), inverse)));
  }
}

// kGroup/kChunks fixed at compile time let GCC unroll the Qwen3-VL shape (2
// query heads per kv head, head_dim 128 = 8 full vectors) and keep the queries
// in registers; 0 means "read from job".
template <class T, int kGroup, int kChunks>
void attend_pair(const AttentionJob& job, int64_t pair, float* scratch) {
  // Arrays of exactly the compile-time size let GCC keep them in registers.
  constexpr int kGroupSlots = kGroup ? kGroup : 8, kChunkSlots = kChunks ? kChunks : 16;
  const int64_t kv_heads = job.shape.kv_heads, head_dim = job.shape.head_dim;
  const int group = kGroup ? kGroup : int(job.shape.heads / kv_heads);
  const int chunks = kChunks ? kChunks : int((head_dim + kLanes - 1) / kLanes);
  const int64_t b = pair / kv_heads, g = pair % kv_heads;
  const KvSequence& seq = job.sequences[b];
  const int64_t visible = seq.visible;
  const T* keys = static_cast<const T*>(seq.keys) + g * seq.capacity * head_dim;
  const T* values = static_cast<const T*>(seq.values) + g * seq.capacity * head_dim;
  const int64_t first_row = (b * job.shape.heads + g * group) * head_dim;  // of q and out
  const T* q = static_cast<const T*>(job.q) + first_row;
  T* out = static_cast<T*>(job.out) + first_row;

  __mmask16 masks[kChunkSlots];
  for (int c = 0; c < chunks; ++c) masks[c] = kChunks ? __mmask16(0xffff) : tail_mask(head_dim - c * kLanes);
  __m512 query[kGroupSlots][kChunkSlots];
  for (int h = 0; h < group; ++h)
    for (int c = 0; c < chunks; ++c) query[h][c] = load(q + h * head_dim + c * kLanes, masks[c]);

  // One sequential stream per kernel call is not enough to keep memory busy
  // (7.7 GB/s here without this, 37 with it): ask for rows a few KiB ahead.
  // A prefetch never faults, so running past the cache's end is harmless.
  const int64_t ahead = kPrefetchBytes / int64_t(sizeof(T) * head_dim) + 1;
  for (int64_t t = 0; t < visible; ++t) {
    const T* key = keys + t * head_dim;
    prefetch_range(key + ahead * head_dim, head_dim);
    __m512 dot[kGroupSlots];
    for (int h = 0; h < group; ++h) dot[h] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; ++c) {
      const __m512 k = load(key + c * kLanes, masks[c]);
      for (int h = 0; h < group; ++h) dot[h] = _mm512_fmadd_ps(query[h][c], k, dot[h]);
    }
    for (int h = 0; h < group; ++h) scratch[h * visible + t] = reduce_pairwise(dot[h]) * job.scale;
  }

  for (int h = 0; h < group; ++h) softmax_in_place(scratch + h * visible, visible, values);

  __m512 acc[kGroupSlots][kChunkSlots];
  for (int h = 0; h < group; ++h)
    for (int c = 0; c < chunks; ++c) acc[h][c] = _mm512_setzero_ps();
  for (int64_t t = 0; t < visible; ++t) {
    const T* value = values + t * head_dim;
    prefetch_range(value + ahead * head_dim, head_dim);
    __m512 p[kGroupSlots];
    for (int h = 0; h < group; ++h) p[h] = _mm512_set1_ps(scratch[h * visible + t]);
    for (int c = 0; c < chunks; ++c) {
      const __m512 v = load(value + c * kLanes, masks[c]);
      for (int h = 0; h < group; ++h) acc[h][c] = _mm512_fmadd_ps(p[h], v, acc[h][c]);
    }
  }
  for (int h = 0; h < group; ++h)
    for (int c = 0; c < chunks; ++c) store(out + h * head_dim + c * kLanes, acc[h][c], masks[c]);
}

template <class T>
void attend_pair_dispatch(const AttentionJob& job, int64_t pair, float* scratch) {
  // A fixed kChunks means head_dim is exactly kChunks · 16 (no partial vector).
  if (job.shape.heads == 2 * job.shape.kv_heads && job.shape.head_dim == 128)
    attend_pair<T, 2, 8>(job, pair, scratch);
  else
    attend_pair<T, 0, 0>(job, pair, scratch);
}

// reduce_pairwise of 16 vectors v[i] at once, lane 4 · (i % 4) + i / 4 of
// the result: every sum pairs the same lanes as reduce_pairwise (halves of
// 256, 128, 64, then 32 bits), so each equals reduce_pairwise(v[i]) bit for bit.
inline __m512 reduce_pairwise16(const __m512 (&v)[16]) {
  __m512 eight[8];  // [lanes 0-7 of v[2j] + lanes 8-15, the same of v[2j + 1]]
  for (int j = 0; j < 8; ++j)
    eight[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  __m512 four[4];  // 128-bit lane L: four sums of v[4k + L]
  for (int k = 0; k < 4; ++k)
    four[k] = _mm512_add_ps(_mm512_shuffle_f32x4(eight[2 * k], eight[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_f32x4(eight[2 * k], eight[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  __m512 two[2];  // lane L: two sums of v[L], of v[4 + L] (two[0]); of v[8 + L], v[12 + L] (two[1])
  for (int k = 0; k < 2; ++k)
    two[k] = _mm512_add_ps(_mm512_shuffle_ps(four[2 * k], four[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(four[2 * k], four[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_ps(two[0], two[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// Two queries over one cache (sequences b and b + 1 share keys and values;
// b sees va ≤ vb positions), kv head g, for the Qwen3-VL shape only (2 query
// heads per kv head, head_dim 128): every key and value row is loaded and
// widened once for both queries, which is most of a prefill's attention work
// besides the multiply-adds. Each score, softmax and output is computed as
// attend_pair<T, 2, 8> computes it, in the same order: the same bits.
// scratch holds 2 · (va + vb) floats.
template <class T>
void attend_two(const AttentionJob& job, int64_t b, int64_t g, float* scratch) {
  constexpr int kGroup = 2, kChunks = 8;
  constexpr int64_t kDim = kChunks * kLanes;
  const KvSequence& first = job.sequences[b];
  const int64_t visible[2] = {first.visible, job.sequences[b + 1].visible};
  const T* keys = static_cast<const T*>(first.keys) + g * first.capacity * kDim;
  const T* values = static_cast<const T*>(first.values) + g * first.capacity * kDim;
  alignas(64) float query[2][kGroup][kDim];  // widened once; read from L1 as FMA operands
  for (int j = 0; j < 2; ++j) {
    const T* q = static_cast<const T*>(job.q) + ((b + j) * job.shape.heads + g * kGroup) * kDim;
    for (int h = 0; h < kGroup; ++h)
      for (int c = 0; c < kChunks; ++c) _mm512_store_ps(&query[j][h][c * kLanes], load(q + h * kDim + c * kLanes, 0xffff));
  }
  float* scores[2][kGroup];
  for (int h = 0; h < kGroup; ++h) {
    scores[0][h] = scratch + h * visible[0];
    scores[1][h] = scratch + kGroup * visible[0] + h * visible[1];
  }
  const int64_t ahead = kPrefetchBytes / int64_t(sizeof(T) * kDim) + 1;

  // Scores: positions both queries see, then the second's last ones.
  const auto score_rows = [&](int64_t begin, int64_t end, int first_query) {
    for (int64_t t = begin; t < end; ++t) {
      const T* key = keys + t * kDim;
      prefetch_range(key + ahead * kDim, kDim);
      __m512 k[kChunks];
      for (int c = 0; c < kChunks; ++c) k[c] = load(key + c * kLanes, 0xffff);
      for (int j = first_query; j < 2; ++j)
        for (int h = 0; h < kGroup; ++h) {
          __m512 dot = _mm512_setzero_ps();
          for (int c = 0; c < kChunks; ++c) dot = _mm512_fmadd_ps(_mm512_load_ps(&query[j][h][c * kLanes]), k[c], dot);
          scores[j][h][t] = reduce_pairwise(dot) * job.scale;
        }
    }
  };
  // Both queries' positions 4 at a time: the 16 dot vectors (4 rows, 4 keys)
  // summed horizontally together, each with reduce_pairwise's pairs in its
  // order (the same bits) at a third of the instructions.
  const __m512i by_row = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512 scale = _mm512_set1_ps(job.scale);
  int64_t t0 = 0;
  for (; t0 + 4 <= visible[0]; t0 += 4) {
    __m512 dots[16];  // [4 · row + key], row = 2 · query + head
    for (int key = 0; key < 4; ++key) {
      const T* row = keys + (t0 + key) * kDim;
      prefetch_range(row + ahead * kDim, kDim);
      __m512 k[kChunks];
      for (int c = 0; c < kChunks; ++c) k[c] = load(row + c * kLanes, 0xffff);
      for (int j = 0; j < 2; ++j)
        for (int h = 0; h < kGroup; ++h) {
          __m512 dot = _mm512_setzero_ps();
          for (int c = 0; c < kChunks; ++c) dot = _mm512_fmadd_ps(_mm512_load_ps(&query[j][h][c * kLanes]), k[c], dot);
          dots[4 * (2 * j + h) + key] = dot;
        }
    }
    const __m512 sums = reduce_pairwise16(dots);  // lane 4 · key + row
    const __m512 per_row = _mm512_mul_ps(_mm512_permutexvar_ps(by_row, sums), scale);  // lane 4 · row + key
    // The lane index must be an immediate, which a loop gives only when the
    // compiler unrolls it (not at -O1, the sanitizer build): written out.
    static_assert(kGroup == 2, "two queries × two heads: four rows of four keys");
    _mm_storeu_ps(scores[0][0] + t0, _mm512_extractf32x4_ps(per_row, 0));
    _mm_storeu_ps(scores[0][1] + t0, _mm512_extractf32x4_ps(per_row, 1));
    _mm_storeu_ps(scores[1][0] + t0, _mm512_extractf32x4_ps(per_row, 2));
    _mm_storeu_ps(scores[1][1] + t0, _mm512_extractf32x4_ps(per_row, 3));
  }
  score_rows(t0, visible[0], 0);
  score_rows(visible[0], visible[1], 1);
  for (int j = 0; j < 2; ++j)
    for (int h = 0; h < kGroup; ++h) softmax_in_place(scores[j][h], visible[j], values);

  // Σ p·v, half of head_dim at a time (2 queries × 2 heads × 4 vectors of
  // sums fit the registers beside the values).
  constexpr int kHalf = kChunks / 2;
  for (int half = 0; half < 2; ++half) {
    __m512 acc[2][kGroup][kHalf];
    for (int j = 0; j < 2; ++j)
      for (int h = 0; h < kGroup; ++h)
        for (int c = 0; c < kHalf; ++c) acc[j][h][c] = _mm512_setzero_ps();
    const auto weigh_rows = [&](int64_t begin, int64_t end, int first_query) {
      for (int64_t t = begin; t < end; ++t) {
        const T* value = values + t * kDim + half * kHalf * kLanes;
        if (half == 0) prefetch_range(value + ahead * kDim, kDim);
        __m512 v[kHalf];
        for (int c = 0; c < kHalf; ++c) v[c] = load(value + c * kLanes, 0xffff);
        for (int j = first_query; j < 2; ++j)
          for (int h = 0; h < kGroup; ++h) {
            const __m512 p = _mm512_set1_ps(scores[j][h][t]);
            for (int c = 0; c < kHalf; ++c) acc[j][h][c] = _mm512_fmadd_ps(p, v[c], acc[j][h][c]);
          }
      }
    };
    weigh_rows(0, visible[0], 0);
    weigh_rows(visible[0], visible[1], 1);
    for (int j = 0; j < 2; ++j) {
      T* out = static_cast<T*>(job.out) + ((b + j) * job.shape.heads + g * kGroup) * kDim + half * kHalf * kLanes;
      for (int h = 0; h < kGroup; ++h)
        for (int c = 0; c < kHalf; ++c) store(out + h * kDim + c * kLanes, acc[j][h][c], 0xffff);
    }
  }
}

template <class T>
void silu_mul_range(T* gate, const T* up, int64_t begin, int64_t end) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = begin; i < end; i += kLanes) {
    const __mmask16 m = tail_mask(end - i);
    const __m512 g = load(gate + i, m);
    const __m512 silu = round_to(gate, _mm512_div_ps(g, _mm512_add_ps(one, exp_poly(_mm512_sub_ps(_mm512_setzero_ps(), g)))));
    store(gate + i, _mm512_mul_ps(silu, load(up + i, m)), m);
  }
}

void rms_norm_rows_tier(const NormJob& job, int64_t row_begin, int64_t row_end) {
  if (job.storage == Storage::F32)
    rms_norm_rows<float>(job, row_begin, row_end);
  else
    rms_norm_rows<uint16_t>(job, row_begin, row_end);
}

void head_norm_rope_rows_tier(const HeadRopeJob& job, int64_t row_begin, int64_t row_end) {
  if (job.storage == Storage::F32)
    head_norm_rope_rows<float>(job, row_begin, row_end);
  else
    head_norm_rope_rows<uint16_t>(job, row_begin, row_end);
}

void attend_pair_tier(const AttentionJob& job, int64_t pair, float* scratch) {
  if (job.storage == Storage::F32)
    attend_pair_dispatch<float>(job, pair, scratch);
  else
    attend_pair_dispatch<uint16_t>(job, pair, scratch);
}

void attend_two_tier(const AttentionJob& job, int64_t b, int64_t g, float* scratch) {
  if (job.storage == Storage::F32)
    attend_two<float>(job, b, g, scratch);
  else
    attend_two<uint16_t>(job, b, g, scratch);
}

void silu_mul_tier(Storage s, void* gate, const void* up, int64_t begin, int64_t end) {
  if (s == Storage::F32)
    silu_mul_range(static_cast<float*>(gate), static_cast<const float*>(up), begin, end);
  else
    silu_mul_range(static_cast<uint16_t*>(gate), static_cast<const uint16_t*>(up), begin, end);
}

}  // namespace

const DecodeKernels kDecodeAvx512 = {rms_norm_rows_tier, head_norm_rope_rows_tier, attend_pair_tier, silu_mul_tier,
                                     attend_two_tier};

}  // namespace qvl::kernels::decode_detail
