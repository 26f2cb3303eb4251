// Dispatch, threading and the portable versions of the vision kernels (the
// generic and neon tiers): the vector tiers' algorithms (16 lanes of partial
// sums, the polynomial exp) in loops GCC vectorizes for the baseline ISA.
#include "qvl/kernels/vision_ops.h"

#include <fmt/core.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/simd_portable.h"
#include "qvl/kernels/vision_ops_detail.h"

namespace qvl::kernels {

using namespace vision_detail;

namespace {

using namespace simd_portable;

// Grain sizes: below these a second thread costs more than it saves.
constexpr int64_t kRowGrain = 16;
constexpr int64_t kElementGrain = 1 << 15;

template <class T>
void add_layer_norm_rows(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const int64_t cols = job.cols, full = cols / kLanes * kLanes;
  for (int64_t r = row_begin; r < row_end; ++r) {
    T* x = static_cast<T*>(job.x) + r * cols;
    const T* add = job.add ? static_cast<const T*>(job.add) + r * cols : nullptr;
    T* y = static_cast<T*>(job.y) + r * cols;
    if (add)
      for (int64_t c = 0; c < cols; ++c) store(x, c, load(x, c) + load(add, c));
    float sums[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int l = 0; l < kLanes; ++l) sums[l] += load(x, c + l);
    for (int64_t c = full; c < cols; ++c) sums[c - full] += load(x, c);
    const float mean = reduce_pairwise(sums) / float(cols);
    float squares[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float d = load(x, c + l) - mean;
        squares[l] += d * d;
      }
    for (int64_t c = full; c < cols; ++c) {
      const float d = load(x, c) - mean;
      squares[c - full] += d * d;
    }
    const float rstd = 1.0f / std::sqrt(reduce_pairwise(squares) / float(cols) + job.eps);
    for (int64_t c = 0; c < cols; ++c) store(y, c, (load(x, c) - mean) * rstd * job.gamma[c] + job.beta[c]);
  }
}

// 0.5·x·(1 + tanh(u)) = x / (1 + e^(-2u)), one exp and one division.
template <class T>
void gelu_tanh_range(T* x, int64_t begin, int64_t end) {
  const float minus_two_sqrt_2_over_pi = -2.0f * 0.7978845608028654f, cubic = 0.044715f;
  for (int64_t i = begin; i < end; ++i) {
    const float v = load(x, i);
    const float inner = cubic * v * (v * v) + v;
    store(x, i, v / (1.0f + exp_poly(minus_two_sqrt_2_over_pi * inner)));
  }
}

template <class T>
void softmax_range(T* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end, float* scratch) {
  const int64_t full = cols / kLanes * kLanes;
  for (int64_t r = row_begin; r < row_end; ++r) {
    T* row = x + r * cols;
    float maxima[kLanes];
    for (float& m : maxima) m = -INFINITY;
    for (int64_t c = 0; c < full; c += kLanes)
      for (int l = 0; l < kLanes; ++l) maxima[l] = max_of(maxima[l], load(row, c + l));
    for (int64_t c = full; c < cols; ++c) maxima[c - full] = max_of(maxima[c - full], load(row, c));
    float max_value = -INFINITY;
    for (float m : maxima) max_value = max_of(max_value, m);
    float sums[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        scratch[c + l] = exp_poly((load(row, c + l) - max_value) * scale);
        sums[l] += scratch[c + l];
      }
    for (int64_t c = full; c < cols; ++c) {
      scratch[c] = exp_poly((load(row, c) - max_value) * scale);
      sums[c - full] += scratch[c];
    }
    const float inverse = 1.0f / reduce_pairwise(sums);
    for (int64_t c = 0; c < cols; ++c) store(row, c, scratch[c] * inverse);
  }
}

// x·cos + rotate_half(x)·sin for one head. `__restrict` (q and k never
// overlap the input or the tables): with the float input, checking at run time
// that none of the six streams overlaps takes GCC more tests than it
// is willing to make, and the loop stays scalar.
template <class T>
void rotate_head(const T* __restrict x, const float* __restrict cos, const float* __restrict sin, int64_t half,
                 T* __restrict dst) {
  for (int64_t d = 0; d < half; ++d) {
    const float first = load(x, d), second = load(x, half + d);
    store(dst, d, first * cos[d] - second * sin[d]);
    store(dst, half + d, second * cos[half + d] + first * sin[half + d]);
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
        rotate_head(x, cos, sin, half, static_cast<T*>(which == 0 ? job.q : job.k) + out);
      }
      const T* v_in = qkv + t * 3 * hidden + 2 * hidden + h * head_dim;
      std::memcpy(static_cast<T*>(job.v) + out, v_in, size_t(head_dim) * sizeof(T));
    }
  }
}

template <class T>
void add_position_rows(T* x, const T* table, const int64_t* corners, const float* weights, int64_t rows,
                       int64_t cols, int64_t row_begin, int64_t row_end) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const T* t[4];
    float w[4];
    for (int c = 0; c < 4; ++c) {
      t[c] = table + corners[c * rows + r] * cols;
      w[c] = weights[c * rows + r];
    }
    T* out = x + r * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float blend = load(t[0], j) * w[0] + load(t[1], j) * w[1] + load(t[2], j) * w[2] + load(t[3], j) * w[3];
      store(out, j, load(out, j) + blend);
    }
  }
}

void add_layer_norm_rows_portable(const NormJob& job, int64_t row_begin, int64_t row_end) {
  job.storage == Storage::F32 ? add_layer_norm_rows<float>(job, row_begin, row_end)
                              : add_layer_norm_rows<uint16_t>(job, row_begin, row_end);
}
void gelu_tanh_portable(Storage s, void* x, int64_t begin, int64_t end) {
  s == Storage::F32 ? gelu_tanh_range(static_cast<float*>(x), begin, end)
                    : gelu_tanh_range(static_cast<uint16_t*>(x), begin, end);
}
void softmax_rows_portable(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                           float* scratch) {
  s == Storage::F32 ? softmax_range(static_cast<float*>(x), cols, scale, row_begin, row_end, scratch)
                    : softmax_range(static_cast<uint16_t*>(x), cols, scale, row_begin, row_end, scratch);
}
void split_qkv_rotary_rows_portable(const SplitJob& job, int64_t token_begin, int64_t token_end) {
  job.storage == Storage::F32 ? split_qkv_rotary_rows<float>(job, token_begin, token_end)
                              : split_qkv_rotary_rows<uint16_t>(job, token_begin, token_end);
}

}  // namespace

namespace vision_detail {

const VisionKernels kVisionPortable = {add_layer_norm_rows_portable, gelu_tanh_portable, softmax_rows_portable,
                                       split_qkv_rotary_rows_portable};

const VisionKernels& vision_kernels(Isa isa, const char* caller) {
  require_isa(isa, caller);
#if QVL_X86
  if (isa == Isa::Avx512) return kVisionAvx512;
  if (runs_avx2_code(isa)) return kVisionAvx2;
#endif
  return kVisionPortable;
}

}  // namespace vision_detail

void add_layer_norm(Storage s, void* x, const void* add, void* y, const float* gamma, const float* beta,
                    int64_t rows, int64_t cols, float eps, Isa isa) {
  const VisionKernels& kernels = vision_kernels(isa, "add_layer_norm");
  if (rows <= 0 || cols <= 0) return;
  const NormJob job{s, x, add, y, gamma, beta, cols, eps};
  parallel_for(rows, kRowGrain,
                   [&](int64_t begin, int64_t end) { kernels.add_layer_norm_rows(job, begin, end); });
}

void gelu_tanh(Storage s, void* x, int64_t n, Isa isa) {
  const VisionKernels& kernels = vision_kernels(isa, "gelu_tanh");
  if (n <= 0) return;
  parallel_for(n, kElementGrain, [&](int64_t begin, int64_t end) { kernels.gelu_tanh(s, x, begin, end); });
}

void softmax_rows(Storage s, void* x, int64_t rows, int64_t cols, float scale, Isa isa) {
  const VisionKernels& kernels = vision_kernels(isa, "softmax_rows");
  if (rows <= 0 || cols <= 0) return;
  parallel_for(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(cols));
    kernels.softmax_rows(s, x, cols, scale, begin, end, scratch.data());
  });
}

void add_position_embedding(Storage s, void* x, const void* table, int64_t table_rows, const int64_t* corners,
                            const float* weights, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < 4 * rows; ++i)
    if (corners[i] < 0 || corners[i] >= table_rows)
      throw Error(fmt::format("add_position_embedding: corner row {} outside the table's {} rows", corners[i],
                              table_rows));
  parallel_for(rows, kRowGrain, [&](int64_t begin, int64_t end) {
    if (s == Storage::F32)
      add_position_rows(static_cast<float*>(x), static_cast<const float*>(table), corners, weights, rows, cols,
                        begin, end);
    else
      add_position_rows(static_cast<uint16_t*>(x), static_cast<const uint16_t*>(table), corners, weights, rows,
                        cols, begin, end);
  });
}

void split_qkv_rotary(Storage s, const void* qkv, const float* cos, const float* sin, int64_t tokens,
                      int64_t heads, int64_t head_dim, void* q, void* k, void* v, Isa isa) {
  const VisionKernels& kernels = vision_kernels(isa, "split_qkv_rotary");
  if (head_dim % 2 != 0)
    throw Error(fmt::format("split_qkv_rotary: rotary needs an even head_dim, got {}", head_dim));
  const SplitJob job{s, qkv, cos, sin, tokens, heads, head_dim, q, k, v};
  parallel_for(tokens, kRowGrain,
                   [&](int64_t begin, int64_t end) { kernels.split_qkv_rotary_rows(job, begin, end); });
}

}  // namespace qvl::kernels
