// Dispatch, threading, checks and the portable versions of the decode kernels.
// The portable code performs the AVX-512 code's operations one lane at a time
// in the same order (std::fma where the vectors use FMA), so both give the
// same bits.
#include "qvl/kernels/decode_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/decode_ops_detail.h"
#include "qvl/kernels/gemv.h"

namespace qvl::kernels {

using namespace decode_detail;

namespace {

inline const void* offset(Storage s, const void* p, int64_t elements) {
  return static_cast<const char*>(p) + elements * element_size(s);
}

constexpr int kLanes = 16;  // floats in a 512-bit register

// Lane i + 8, then i + 4, i + 2, i + 1 into lane 0, as reduce_pairwise does in
// the AVX-512 file.
float reduce_pairwise(float* lanes) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}

float exp_poly(float x) {
  x = std::max(std::min(x, kExpMax), kExpMin);
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2High, x);
  r = std::fma(-n, kLn2Low, r);
  float p = kExpTaylor[0];
  for (int i = 1; i < 8; ++i) p = std::fma(p, r, kExpTaylor[i]);
  return std::ldexp(p, static_cast<int>(n));
}

bool use_avx512(VecPath path, const char* kernel) {
  if (!vec_path_supported(path))
    throw Error(fmt::format("{}: the AVX-512 path was asked for but this CPU lacks AVX-512 F/BW/BF16", kernel));
  return path == VecPath::Avx512 || (path == VecPath::Best && vec_path_supported(VecPath::Avx512));
}

// Below about this many values a second thread costs more than it saves.
constexpr int64_t kValuesPerThread = 1 << 15;

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kValuesPerThread / std::max<int64_t>(1, cols)); }

// Largest query-head group and head_dim the attention kernels hold in registers.
constexpr int64_t kMaxGroup = 8;
constexpr int64_t kMaxHeadDim = 256;

}  // namespace

namespace decode_detail {

int aten_sum_lanes() {
  static const int lanes = [] {
    // Values of mixed magnitudes, summed by ATen and by each candidate order;
    // a probe on which the candidates agree says nothing, so try another.
    std::vector<float> values(96);
    uint32_t state = 12345;
    for (int attempt = 0; attempt < 64; ++attempt) {
      for (float& v : values) {
        state = state * 1664525u + 1013904223u;
        v = std::ldexp(float(state >> 8) / float(1 << 24), int(state % 24) - 12);
      }
      const at::Tensor t = at::from_blob(values.data(), {1, int64_t(values.size())}, at::kFloat);
      const float aten = t.square().sum(-1).item<float>();
      const float by8 = aten_sum_of_squares_scalar(Storage::F32, values.data(), int64_t(values.size()), 8);
      const float by16 = aten_sum_of_squares_scalar(Storage::F32, values.data(), int64_t(values.size()), 16);
      if (by8 == by16) continue;
      return aten == by8 ? 8 : 16;
    }
    return 16;
  }();
  return lanes;
}

float aten_sum_of_squares_scalar(Storage s, const void* x, int64_t n, int lanes) {
  if (n < lanes) lanes = 1;
  const auto square = [&](int64_t i) {
    const float v = load_at(s, x, i);
    return v * v;
  };
  const int64_t vectors = n / lanes, blocks = vectors / 4;
  float acc[4][4][16] = {};  // [level][stream][lane]
  const auto add_block = [&](int64_t block) {
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < lanes; ++l) acc[0][k][l] += square((block * 4 + k) * lanes + l);
  };
  int64_t block = 0;
  while (block + 16 <= blocks) {
    for (int j = 0; j < 16; ++j) add_block(block++);
    for (int level = 1; level < 4; ++level) {
      for (int k = 0; k < 4; ++k)
        for (int l = 0; l < lanes; ++l) {
          acc[level][k][l] += acc[level - 1][k][l];
          acc[level - 1][k][l] = 0;
        }
      if ((block & (int64_t(15) << (4 * level))) != 0) break;
    }
  }
  for (; block < blocks; ++block) add_block(block);
  for (int level = 1; level < 4; ++level)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < lanes; ++l) acc[0][k][l] += acc[level][k][l];
  for (int64_t v = blocks * 4; v < vectors; ++v)
    for (int l = 0; l < lanes; ++l) acc[0][0][l] += square(v * lanes + l);
  for (int k = 1; k < 4; ++k)
    for (int l = 0; l < lanes; ++l) acc[0][0][l] += acc[0][k][l];
  float total = 0;
  for (int64_t i = vectors * lanes; i < n; ++i) total += square(i);
  for (int l = 0; l < lanes; ++l) total += acc[0][0][l];
  return total;
}

void rms_norm_rows_scalar(const NormJob& job, int64_t row_begin, int64_t row_end) {
  const Storage s = job.storage;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const void* x = offset(s, job.x, r * job.cols);
    void* y = const_cast<void*>(offset(s, job.y, r * job.cols));
    const float sum = aten_sum_of_squares_scalar(s, x, job.cols, job.lanes);
    const float inv_rms = 1.0f / std::sqrt(sum / float(job.cols) + job.eps);
    for (int64_t c = 0; c < job.cols; ++c)
      store_at(s, y, c, round_to(s, load_at(s, x, c) * inv_rms) * load_at(s, job.weight, c));
  }
}

void head_norm_rope_rows_scalar(const HeadRopeJob& job, int64_t row_begin, int64_t row_end) {
  const Storage s = job.storage;
  const int64_t head_dim = job.head_dim, half = head_dim / 2;
  for (int64_t r = row_begin; r < row_end; ++r) {
    const void* x = offset(s, job.x, r * head_dim);
    void* y = const_cast<void*>(offset(s, job.y, r * head_dim));
    const float* cos = job.cos + (r / job.heads) * head_dim;
    const float* sin = job.sin + (r / job.heads) * head_dim;
    const float sum = aten_sum_of_squares_scalar(s, x, head_dim, job.lanes);
    const float inv_rms = 1.0f / std::sqrt(sum / float(head_dim) + job.eps);
    const auto normed = [&](int64_t i) {
      return round_to(s, round_to(s, load_at(s, x, i) * inv_rms) * load_at(s, job.weight, i));
    };
    for (int64_t i = 0; i < half; ++i) {
      const float first = normed(i), second = normed(half + i);
      store_at(s, y, i, first * cos[i] - second * sin[i]);
      store_at(s, y, half + i, second * cos[half + i] + first * sin[half + i]);
    }
  }
}

void attend_pair_scalar(const AttentionJob& job, int64_t pair, float* scratch) {
  const Storage s = job.storage;
  const int64_t kv_heads = job.shape.kv_heads, head_dim = job.shape.head_dim;
  const int64_t group = job.shape.heads / kv_heads;
  const int64_t b = pair / kv_heads, g = pair % kv_heads;
  const KvSequence& seq = job.sequences[b];
  const int64_t visible = seq.visible;
  const void* keys = offset(s, seq.keys, g * seq.capacity * head_dim);
  const void* values = offset(s, seq.values, g * seq.capacity * head_dim);
  const int64_t padded = (head_dim + kLanes - 1) / kLanes * kLanes;

  for (int64_t hq = 0; hq < group; ++hq) {
    const int64_t q_row = (b * job.shape.heads + g * group + hq) * head_dim;
    float* scores = scratch + hq * visible;
    for (int64_t t = 0; t < visible; ++t) {
      float lanes[kLanes] = {};
      for (int64_t c = 0; c < padded; c += kLanes)
        for (int l = 0; l < kLanes; ++l) {
          const int64_t d = c + l;
          const float q = d < head_dim ? load_at(s, job.q, q_row + d) : 0.0f;
          const float k = d < head_dim ? load_at(s, keys, t * head_dim + d) : 0.0f;
          lanes[l] = std::fma(q, k, lanes[l]);
        }
      scores[t] = reduce_pairwise(lanes) * job.scale;
    }

    float max_score = -INFINITY;
    for (int64_t t = 0; t < visible; ++t) max_score = std::max(max_score, scores[t]);
    float sums[kLanes] = {};
    for (int64_t t = 0; t < visible; ++t) {
      scores[t] = exp_poly(scores[t] - max_score);
      sums[t % kLanes] += scores[t];
    }
    const float inverse = 1.0f / reduce_pairwise(sums);
    for (int64_t t = 0; t < visible; ++t) scores[t] = round_to(s, scores[t] * inverse);

    for (int64_t d = 0; d < head_dim; ++d) {
      float acc = 0;
      for (int64_t t = 0; t < visible; ++t) acc = std::fma(scores[t], load_at(s, values, t * head_dim + d), acc);
      store_at(s, job.out, q_row + d, acc);
    }
  }
}

void silu_mul_scalar(Storage s, void* gate, const void* up, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = load_at(s, gate, i);
    const float silu = round_to(s, g / (1.0f + exp_poly(-g)));
    store_at(s, gate, i, silu * load_at(s, up, i));
  }
}

void add_into_scalar(Storage s, void* x, const void* add, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) store_at(s, x, i, load_at(s, x, i) + load_at(s, add, i));
}

}  // namespace decode_detail

void rms_norm_rows(Storage s, const void* x, const void* weight, void* y, int64_t rows, int64_t cols, double eps,
                   VecPath path) {
  if (rows <= 0 || cols <= 0) return;
  const bool avx512 = use_avx512(path, "rms_norm_rows");
  // ATen adds eps to a float32 tensor: the double becomes a float first.
  const NormJob job{s, x, weight, y, cols, static_cast<float>(eps), aten_sum_lanes()};
  at::parallel_for(0, rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    avx512 ? rms_norm_rows_avx512(job, begin, end) : rms_norm_rows_scalar(job, begin, end);
  });
}

void head_norm_rope(Storage s, const void* x, const void* weight, const float* cos, const float* sin, void* y,
                    int64_t tokens, int64_t heads, int64_t head_dim, double eps, VecPath path) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw Error(fmt::format("head_norm_rope: rotary needs a positive even head_dim, got {}", head_dim));
  if (tokens <= 0 || heads <= 0) return;
  const bool avx512 = use_avx512(path, "head_norm_rope");
  const HeadRopeJob job{s, x, weight, cos, sin, y, heads, head_dim, static_cast<float>(eps), aten_sum_lanes()};
  at::parallel_for(0, tokens * heads, row_grain(head_dim), [&](int64_t begin, int64_t end) {
    avx512 ? head_norm_rope_rows_avx512(job, begin, end) : head_norm_rope_rows_scalar(job, begin, end);
  });
}

void decode_attention(Storage s, const void* q, const KvSequence* sequences, int64_t batch,
                      const AttentionShape& shape, void* out, VecPath path) {
  if (batch <= 0) return;
  if (shape.kv_heads <= 0 || shape.heads <= 0 || shape.heads % shape.kv_heads != 0 ||
      shape.heads / shape.kv_heads > kMaxGroup)
    throw Error(fmt::format("decode_attention: {} query heads cannot share {} kv heads (groups of at most {})",
                            shape.heads, shape.kv_heads, kMaxGroup));
  if (shape.head_dim <= 0 || shape.head_dim > kMaxHeadDim)
    throw Error(fmt::format("decode_attention: head_dim {} is outside 1..{}", shape.head_dim, kMaxHeadDim));
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const KvSequence& seq = sequences[b];
    if (seq.keys == nullptr || seq.values == nullptr || seq.visible <= 0 || seq.visible > seq.capacity)
      throw Error(fmt::format("decode_attention: sequence {} has {} visible positions in a cache of {}{}", b,
                              seq.visible, seq.capacity, seq.keys && seq.values ? "" : " (no keys/values)"));
    longest = std::max(longest, seq.visible);
  }
  const bool avx512 = use_avx512(path, "decode_attention");
  const AttentionJob job{s, q, sequences, shape, static_cast<float>(1.0 / std::sqrt(double(shape.head_dim))), out};
  const int64_t scratch_floats = shape.heads / shape.kv_heads * longest;
  at::parallel_for(0, batch * shape.kv_heads, 1, [&](int64_t begin, int64_t end) {
    // Grown, never shrunk: a decode step after the first allocates nothing.
    thread_local std::vector<float> scratch;
    if (int64_t(scratch.size()) < scratch_floats) scratch.resize(size_t(scratch_floats));
    for (int64_t pair = begin; pair < end; ++pair)
      avx512 ? attend_pair_avx512(job, pair, scratch.data()) : attend_pair_scalar(job, pair, scratch.data());
  });
}

void silu_mul(Storage s, void* gate, const void* up, int64_t n, VecPath path) {
  if (n <= 0) return;
  const bool avx512 = use_avx512(path, "silu_mul");
  at::parallel_for(0, n, kValuesPerThread, [&](int64_t begin, int64_t end) {
    avx512 ? silu_mul_avx512(s, gate, up, begin, end) : silu_mul_scalar(s, gate, up, begin, end);
  });
}

void add_into(Storage s, void* x, const void* add, int64_t n, VecPath path) {
  if (n <= 0) return;
  const bool avx512 = use_avx512(path, "add_into");
  at::parallel_for(0, n, kValuesPerThread, [&](int64_t begin, int64_t end) {
    avx512 ? add_into_avx512(s, x, add, begin, end) : add_into_scalar(s, x, add, begin, end);
  });
}

}  // namespace qvl::kernels
