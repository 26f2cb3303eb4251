// Internal to the vision kernels: the per-tier row functions vision_ops.cpp
// dispatches to, one table per tier. The avx2 and avx512 tables live in
// vision_ops_avx2.cpp / vision_ops_avx512.cpp (x86 only), the portable one in
// vision_ops.cpp.
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

// One tier's versions of the kernels, each on a range of the work.
struct VisionKernels {
  void (*add_layer_norm_rows)(const NormJob& job, int64_t row_begin, int64_t row_end);
  void (*gelu_tanh)(Storage s, void* x, int64_t begin, int64_t end);
  // scratch: cols floats for the exponentials before they are normalized.
  void (*softmax_rows)(Storage s, void* x, int64_t cols, float scale, int64_t row_begin, int64_t row_end,
                       float* scratch);
  void (*split_qkv_rotary_rows)(const SplitJob& job, int64_t token_begin, int64_t token_end);
};

// The kernels of `isa`'s tier (neon runs the portable ones). Throws
// qvl::Error, naming `caller`, when this CPU cannot run that tier.
const VisionKernels& vision_kernels(Isa isa, const char* caller);

extern const VisionKernels kVisionPortable;
#if QVL_X86
extern const VisionKernels kVisionAvx2;    // entered only when the CPU has AVX2+FMA+F16C
extern const VisionKernels kVisionAvx512;  // entered only when the CPU has AVX-512 F+BW+VL+DQ
#endif

}  // namespace qvl::kernels::vision_detail
