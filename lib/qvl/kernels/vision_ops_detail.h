// Internal to the vision kernels: the per-ISA row functions vision_ops.cpp
// dispatches to. The AVX-512 ones live in vision_ops_avx512.cpp, the only
// file of these built with AVX-512 flags.
#pragma once
#include <cstdint>

#include "qvl/kernels/vision_ops.h"

namespace qvl::kernels::vision_detail {

struct NormJob {
  Storage storage;
  void* x;
  const void* add;  // may be null
  void* y;
  const float* gamma;
  const float* beta;
  int64_t cols;
  float eps;
};
void add_layer_norm_rows_scalar(const NormJob& job, int64_t row_begin, int64_t row_end);
void add_layer_norm_rows_avx512(const NormJob& job, int64_t row_begin, int64_t row_end);

void gelu_tanh_scalar(Storage s, void* x, int64_t begin, int64_t end);
void gelu_tanh_avx512(Storage s, void* x, int64_t begin, int64_t end);

// scratch: cols floats for the exponentials before they are normalized.
void softmax_rows_scalar(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                         float* scratch);
void softmax_rows_avx512(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                         float* scratch);

struct SplitJob {
  Storage storage;
  const void* qkv;
  const float* cos;
  const float* sin;
  int64_t tokens, heads, head_dim;
  void* q;
  void* k;
  void* v;
};
void split_qkv_rotary_rows_scalar(const SplitJob& job, int64_t token_begin, int64_t token_end);
void split_qkv_rotary_rows_avx512(const SplitJob& job, int64_t token_begin, int64_t token_end);

}  // namespace qvl::kernels::vision_detail
