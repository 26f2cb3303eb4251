// AVX-512 versions of the vision kernels: the avx512 tier's table. This file
// alone of them is compiled with -mavx512* (lib/CMakeLists.txt; F+BW+VL+DQ,
// no AVX512-BF16) and is only entered when that tier is active; everything in
// it has internal linkage or lives in vision_detail.
#include <immintrin.h>

#include <cmath>

#include "qvl/kernels/simd_avx512.h"
#include "qvl/kernels/vision_ops_detail.h"

namespace qvl::kernels::vision_detail {
namespace {

using namespace simd_avx512;

template <class T>
void add_layer_norm_rows(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const int64_t cols = job.cols;
  for (int64_t r = row_begin; r < row_end; ++r) {
    T* x = static_cast<T*>(job.x) + r * cols;
    const T* add = job.add ? static_cast<const T*>(job.add) + r * cols : nullptr;
    T* y = static_cast<T*>(job.y) + r * cols;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      __m512 v = load(x + c, m);
      if (add) {
        v = round_to(x, _mm512_add_ps(v, load(add + c, m)));
        store(x + c, v, m);
      }
      sum = _mm512_add_ps(sum, v);
    }
    const __m512 mean = _mm512_set1_ps(reduce_pairwise(sum) / float(cols));
    __m512 squares = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      const __m512 d = _mm512_maskz_sub_ps(m, load(x + c, m), mean);
      squares = _mm512_fmadd_ps(d, d, squares);
    }
    const __m512 rstd = _mm512_set1_ps(1.0f / std::sqrt(reduce_pairwise(squares) / float(cols) + job.eps));
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      const __m512 normed = _mm512_mul_ps(_mm512_sub_ps(load(x + c, m), mean), rstd);
      store(y + c, _mm512_fmadd_ps(normed, _mm512_maskz_loadu_ps(m, job.gamma + c), _mm512_maskz_loadu_ps(m, job.beta + c)),
            m);
    }
  }
}

// 0.5·x·(1 + tanh(u)) = x / (1 + e^(-2u)), one exp and one division.
template <class T>
void gelu_tanh_range(T* x, int64_t begin, int64_t end) {
  const __m512 minus_two_sqrt_2_over_pi = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 cubic = _mm512_set1_ps(0.044715f), one = _mm512_set1_ps(1.0f);
  for (int64_t i = begin; i < end; i += kLanes) {
    const __mmask16 m = tail_mask(end - i);
    const __m512 v = load(x + i, m);
    const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(cubic, v), _mm512_mul_ps(v, v), v);
    const __m512 e = exp_poly(_mm512_mul_ps(minus_two_sqrt_2_over_pi, inner));
    store(x + i, _mm512_div_ps(v, _mm512_add_ps(one, e)), m);
  }
}

template <class T>
void softmax_range(T* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end, float* scratch) {
  const __m512 minus_inf = _mm512_set1_ps(-INFINITY), scale_v = _mm512_set1_ps(scale);
  for (int64_t r = row_begin; r < row_end; ++r) {
    T* row = x + r * cols;
    __m512 max_v = minus_inf;
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      max_v = _mm512_mask_max_ps(max_v, m, max_v, load(row + c, m));
    }
    const __m512 max_all = _mm512_set1_ps(_mm512_reduce_max_ps(max_v));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      const __m512 e = exp_poly(_mm512_mul_ps(_mm512_sub_ps(load(row + c, m), max_all), scale_v));
      sum = _mm512_mask_add_ps(sum, m, sum, e);
      _mm512_mask_storeu_ps(scratch + c, m, e);
    }
    const __m512 inverse = _mm512_set1_ps(1.0f / reduce_pairwise(sum));
    for (int64_t c = 0; c < cols; c += kLanes) {
      const __mmask16 m = tail_mask(cols - c);
      store(row + c, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, scratch + c), inverse), m);
    }
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
        for (int64_t c = 0; c < half; c += kLanes) {
          const __mmask16 m = tail_mask(half - c);
          const __m512 first = load(x + c, m), second = load(x + half + c, m);
          const __m512 cos_first = load(cos + c, m), sin_first = load(sin + c, m);
          const __m512 cos_second = load(cos + half + c, m), sin_second = load(sin + half + c, m);
          store(dst + c, _mm512_sub_ps(_mm512_mul_ps(first, cos_first), _mm512_mul_ps(second, sin_first)), m);
          store(dst + half + c, _mm512_add_ps(_mm512_mul_ps(second, cos_second), _mm512_mul_ps(first, sin_second)),
                m);
        }
      }
      const T* v_in = qkv + t * 3 * hidden + 2 * hidden + h * head_dim;
      T* v_out = static_cast<T*>(job.v) + out;
      for (int64_t c = 0; c < head_dim; ++c) v_out[c] = v_in[c];
    }
  }
}

void split_qkv_rotary_rows_tier(const SplitJob& job, int64_t token_begin, int64_t token_end) {
  if (job.storage == Storage::F32)
    split_qkv_rotary_rows<float>(job, token_begin, token_end);
  else
    split_qkv_rotary_rows<uint16_t>(job, token_begin, token_end);
}

void add_layer_norm_rows_tier(const NormJob& job, int64_t row_begin, int64_t row_end) {
  if (job.storage == Storage::F32)
    add_layer_norm_rows<float>(job, row_begin, row_end);
  else
    add_layer_norm_rows<uint16_t>(job, row_begin, row_end);
}

void gelu_tanh_tier(Storage s, void* x, int64_t begin, int64_t end) {
  if (s == Storage::F32)
    gelu_tanh_range(static_cast<float*>(x), begin, end);
  else
    gelu_tanh_range(static_cast<uint16_t*>(x), begin, end);
}

void softmax_rows_tier(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                         float* scratch) {
  if (s == Storage::F32)
    softmax_range(static_cast<float*>(x), cols, scale, row_begin, row_end, scratch);
  else
    softmax_range(static_cast<uint16_t*>(x), cols, scale, row_begin, row_end, scratch);
}

}  // namespace

const VisionKernels kVisionAvx512 = {add_layer_norm_rows_tier, gelu_tanh_tier, softmax_rows_tier,
                                     split_qkv_rotary_rows_tier};

}  // namespace qvl::kernels::vision_detail
