// AVX2 versions of the vision kernels: the avx2 tier's table. This file alone
// of them is compiled with -mavx2 -mfma (lib/CMakeLists.txt) and is only
// entered when that tier is active; everything in it has internal linkage or
// lives in vision_detail.
//
// Lane for lane the arithmetic of vision_ops_avx512.cpp (the row sums in 16
// lanes as a register pair, reduced in the same order; FMA where it uses
// FMA), so both tiers give the same bits.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "qvl/kernels/simd_avx2.h"
#include "qvl/kernels/vision_ops_detail.h"

namespace qvl::kernels::vision_detail {
namespace {

using namespace simd_avx2;

constexpr int kChunk = 16;  // values per step of the 16-lane partial sums

template <class T>
void add_layer_norm_rows(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const int64_t cols = job.cols;
  for (int64_t r = row_begin; r < row_end; ++r) {
    T* x = static_cast<T*>(job.x) + r * cols;
    const T* add = job.add ? static_cast<const T*>(job.add) + r * cols : nullptr;
    T* y = static_cast<T*>(job.y) + r * cols;
    if (add)
      for_each_vector(0, cols, [&](int64_t c, int64_t n) {
        store(x + c, _mm256_add_ps(load(x + c, n), load(add + c, n)), n);
      });
    F32x16 sum = zero16();
    for (int64_t c = 0; c < cols; c += kChunk) sum = simd_avx2::add(sum, load16(x + c, cols - c));
    const __m256 mean = _mm256_set1_ps(reduce_pairwise(sum) / float(cols));
    F32x16 squares = zero16();
    for (int64_t c = 0; c < cols; c += kChunk) {
      const int64_t left = cols - c;
      const __m256 lo = keep_first(_mm256_sub_ps(load(x + c, left), mean), left);
      const __m256 hi = keep_first(_mm256_sub_ps(load(x + c + kLanes, left - kLanes), mean), left - kLanes);
      squares = {_mm256_fmadd_ps(lo, lo, squares.lo), _mm256_fmadd_ps(hi, hi, squares.hi)};
    }
    const __m256 rstd = _mm256_set1_ps(1.0f / std::sqrt(reduce_pairwise(squares) / float(cols) + job.eps));
    for_each_vector(0, cols, [&](int64_t c, int64_t n) {
      const __m256 normed = _mm256_mul_ps(_mm256_sub_ps(load(x + c, n), mean), rstd);
      store(y + c, _mm256_fmadd_ps(normed, load(job.gamma + c, n), load(job.beta + c, n)), n);
    });
  }
}

// 0.5·x·(1 + tanh(u)) = x / (1 + e^(-2u)), one exp and one division.
template <class T>
void gelu_tanh_range(T* x, int64_t begin, int64_t end) {
  const __m256 minus_two_sqrt_2_over_pi = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 cubic = _mm256_set1_ps(0.044715f), one = _mm256_set1_ps(1.0f);
  for_each_vector(begin, end, [&](int64_t i, int64_t n) {
    const __m256 v = load(x + i, n);
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(cubic, v), _mm256_mul_ps(v, v), v);
    const __m256 e = exp_poly(_mm256_mul_ps(minus_two_sqrt_2_over_pi, inner));
    store(x + i, _mm256_div_ps(v, _mm256_add_ps(one, e)), n);
  });
}

template <class T>
void softmax_range(T* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end, float* scratch) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  for (int64_t r = row_begin; r < row_end; ++r) {
    T* row = x + r * cols;
    // The maximum is exact in any order.
    __m256 max_v = _mm256_set1_ps(-INFINITY);
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) max_v = _mm256_max_ps(max_v, load(row + c));
    float max_value = reduce_max(max_v);
    for (; c < cols; ++c) max_value = simd_portable::max_of(max_value, simd_portable::load(row, c));
    const __m256 max_all = _mm256_set1_ps(max_value);
    F32x16 sum = zero16();
    for (c = 0; c < cols; c += kChunk) {
      const int64_t left = cols - c;
      const auto exp_of = [&](int64_t i, int64_t n) {
        return keep_first(exp_poly(_mm256_mul_ps(_mm256_sub_ps(load(row + i, n), max_all), scale_v)), n);
      };
      const __m256 lo = exp_of(c, left), hi = exp_of(c + kLanes, left - kLanes);
      sum = simd_avx2::add(sum, F32x16{lo, hi});
      store(scratch + c, lo, left);
      store(scratch + c + kLanes, hi, left - kLanes);
    }
    const __m256 inverse = _mm256_set1_ps(1.0f / reduce_pairwise(sum));
    for_each_vector(0, cols, [&](int64_t i, int64_t n) {
      store(row + i, _mm256_mul_ps(load(scratch + i, n), inverse), n);
    });
  }
}

template <class T>
void split_qkv_rotary_rows(const SplitJob& job, int64_t token_begin, int64_t token_end) {
  const int64_t head_dim = job.head_dim, half = head_dim / 2, hidden = job.heads * head_dim;
  const T* qkv = static_cast<const T*>(job.qkv);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const float* cos = job.cos + t * head_dim;
    const float* sin = job.sin + t * head_dim;
    for (int64_t h = 0; h < job.heads; ++h) {
      const int64_t out = (h * job.tokens + t) * head_dim;
      for (int which = 0; which < 2; ++which) {  // q, then k
        const T* x = qkv + t * 3 * hidden + which * hidden + h * head_dim;
        T* dst = static_cast<T*>(which == 0 ? job.q : job.k) + out;
        for_each_vector(0, half, [&](int64_t c, int64_t n) {
          const __m256 first = load(x + c, n), second = load(x + half + c, n);
          const __m256 cos_first = load(cos + c, n), sin_first = load(sin + c, n);
          const __m256 cos_second = load(cos + half + c, n), sin_second = load(sin + half + c, n);
          store(dst + c, _mm256_sub_ps(_mm256_mul_ps(first, cos_first), _mm256_mul_ps(second, sin_first)), n);
          store(dst + half + c, _mm256_add_ps(_mm256_mul_ps(second, cos_second), _mm256_mul_ps(first, sin_second)),
                n);
        });
      }
      const T* v_in = qkv + t * 3 * hidden + 2 * hidden + h * head_dim;
      std::memcpy(static_cast<T*>(job.v) + out, v_in, size_t(head_dim) * sizeof(T));
    }
  }
}

void add_layer_norm_rows_tier(const NormJob& job, int64_t row_begin, int64_t row_end) {
  job.storage == Storage::F32 ? add_layer_norm_rows<float>(job, row_begin, row_end)
                              : add_layer_norm_rows<uint16_t>(job, row_begin, row_end);
}
void gelu_tanh_tier(Storage s, void* x, int64_t begin, int64_t end) {
  s == Storage::F32 ? gelu_tanh_range(static_cast<float*>(x), begin, end)
                    : gelu_tanh_range(static_cast<uint16_t*>(x), begin, end);
}
void softmax_rows_tier(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                       float* scratch) {
  s == Storage::F32 ? softmax_range(static_cast<float*>(x), cols, scale, row_begin, row_end, scratch)
                    : softmax_range(static_cast<uint16_t*>(x), cols, scale, row_begin, row_end, scratch);
}
void split_qkv_rotary_rows_tier(const SplitJob& job, int64_t token_begin, int64_t token_end) {
  job.storage == Storage::F32 ? split_qkv_rotary_rows<float>(job, token_begin, token_end)
                              : split_qkv_rotary_rows<uint16_t>(job, token_begin, token_end);
}

}  // namespace

const VisionKernels kVisionAvx2 = {add_layer_norm_rows_tier, gelu_tanh_tier, softmax_rows_tier,
                                   split_qkv_rotary_rows_tier};

}  // namespace qvl::kernels::vision_detail
