// Dispatch, threading and the portable versions of the vision kernels.
#include "qvl/kernels/vision_ops.h"

#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/vision_ops_detail.h"

namespace qvl::kernels {

using namespace vision_detail;

namespace {

bool use_avx512(VecPath path) {
  if (!vec_path_supported(path))
    throw Error("vision kernels: the AVX-512 path was asked for but this CPU lacks AVX-512 F/BW/BF16");
  return path == VecPath::Avx512 || (path == VecPath::Best && vec_path_supported(VecPath::Avx512));
}

// Grain sizes: below these a second thread costs more than it saves.
constexpr int64_t kRowGrain = 16;
constexpr int64_t kElementGrain = 1 << 15;

}  // namespace

bool vec_path_supported(VecPath path) {
  if (path != VecPath::Avx512) return true;
  static const bool has = cpu_has_avx512_bf16();
  return has;
}

namespace vision_detail {

void add_layer_norm_rows_scalar(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const Storage s = job.storage;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t base = r * job.cols;
    double sum = 0;
    for (int64_t c = 0; c < job.cols; ++c) {
      float v = load_at(s, job.x, base + c);
      if (job.add) {
        v = round_to(s, v + load_at(s, job.add, base + c));
        store_at(s, job.x, base + c, v);
      }
      sum += v;
    }
    const float mean = float(sum / double(job.cols));
    double squares = 0;
    for (int64_t c = 0; c < job.cols; ++c) {
      const float d = load_at(s, job.x, base + c) - mean;
      squares += double(d) * d;
    }
    const float rstd = 1.0f / std::sqrt(float(squares / double(job.cols)) + job.eps);
    for (int64_t c = 0; c < job.cols; ++c) {
      const float normed = (load_at(s, job.x, base + c) - mean) * rstd;
      store_at(s, job.y, base + c, normed * job.gamma[c] + job.beta[c]);
    }
  }
}

void gelu_tanh_scalar(Storage s, void* x, int64_t begin, int64_t end) {
  const float sqrt_2_over_pi = 0.7978845608028654f;
  for (int64_t i = begin; i < end; ++i) {
    const float v = load_at(s, x, i);
    const float inner = sqrt_2_over_pi * (v + 0.044715f * v * v * v);
    store_at(s, x, i, 0.5f * v * (1.0f + std::tanh(inner)));
  }
}

void softmax_rows_scalar(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                         float* scratch) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t base = r * cols;
    float max_value = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) max_value = std::max(max_value, load_at(s, x, base + c));
    float sum = 0;
    for (int64_t c = 0; c < cols; ++c) {
      scratch[c] = std::exp((load_at(s, x, base + c) - max_value) * scale);
      sum += scratch[c];
    }
    const float inverse = 1.0f / sum;
    for (int64_t c = 0; c < cols; ++c) store_at(s, x, base + c, scratch[c] * inverse);
  }
}

void split_qkv_rotary_rows_scalar(const SplitJob& job, int64_t token_begin, int64_t token_end) {
  const Storage s = job.storage;
  const int64_t head_dim = job.head_dim, half = head_dim / 2, hidden = job.heads * head_dim;
  const size_t esize = element_size(s);
  for (int64_t t = token_begin; t < token_end; ++t) {
    const float* c = job.cos + t * head_dim;
    const float* sn = job.sin + t * head_dim;
    for (int64_t h = 0; h < job.heads; ++h) {
      const int64_t out = (h * job.tokens + t) * head_dim;
      for (int which = 0; which < 2; ++which) {  // q, then k
        const int64_t in = t * 3 * hidden + which * hidden + h * head_dim;
        void* dst = which == 0 ? job.q : job.k;
        for (int64_t d = 0; d < half; ++d) {
          const float first = load_at(s, job.qkv, in + d), second = load_at(s, job.qkv, in + half + d);
          store_at(s, dst, out + d, first * c[d] - second * sn[d]);
          store_at(s, dst, out + half + d, second * c[half + d] + first * sn[half + d]);
        }
      }
      const char* v_in =
          static_cast<const char*>(job.qkv) + (t * 3 * hidden + 2 * hidden + h * head_dim) * esize;
      std::copy(v_in, v_in + head_dim * esize, static_cast<char*>(job.v) + out * esize);
    }
  }
}

}  // namespace vision_detail

void add_layer_norm(Storage s, void* x, const void* add, void* y, const float* gamma, const float* beta,
                    int64_t rows, int64_t cols, float eps, VecPath path) {
  if (rows <= 0 || cols <= 0) return;
  const NormJob job{s, x, add, y, gamma, beta, cols, eps};
  const bool avx512 = use_avx512(path);
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    avx512 ? add_layer_norm_rows_avx512(job, begin, end) : add_layer_norm_rows_scalar(job, begin, end);
  });
}

void gelu_tanh(Storage s, void* x, int64_t n, VecPath path) {
  if (n <= 0) return;
  const bool avx512 = use_avx512(path);
  at::parallel_for(0, n, kElementGrain, [&](int64_t begin, int64_t end) {
    avx512 ? gelu_tanh_avx512(s, x, begin, end) : gelu_tanh_scalar(s, x, begin, end);
  });
}

void softmax_rows(Storage s, void* x, int64_t rows, int64_t cols, float scale, VecPath path) {
  if (rows <= 0 || cols <= 0) return;
  const bool avx512 = use_avx512(path);
  at::parallel_for(0, rows, kRowGrain, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(cols));
    avx512 ? softmax_rows_avx512(s, x, cols, scale, begin, end, scratch.data())
           : softmax_rows_scalar(s, x, cols, scale, begin, end, scratch.data());
  });
}

void split_qkv_rotary(Storage s, const void* qkv, const float* cos, const float* sin, int64_t tokens,
                      int64_t heads, int64_t head_dim, void* q, void* k, void* v, VecPath path) {
  if (head_dim % 2 != 0)
    throw Error(fmt::format("vision kernels: rotary needs an even head_dim, got {}", head_dim));
  const SplitJob job{s, qkv, cos, sin, tokens, heads, head_dim, q, k, v};
  const bool avx512 = use_avx512(path);
  at::parallel_for(0, tokens, kRowGrain, [&](int64_t begin, int64_t end) {
    avx512 ? split_qkv_rotary_rows_avx512(job, begin, end) : split_qkv_rotary_rows_scalar(job, begin, end);
  });
}

}  // namespace qvl::kernels
