// Internal to the decode kernels: the per-tier functions decode_ops.cpp
// dispatches to, one table per tier. The avx2 and avx512 tables live in
// decode_ops_avx2.cpp / decode_ops_avx512.cpp (x86 only), the portable one
// in decode_ops.cpp. All these files are built with -ffp-contract=off: a
// multiply and an add fused into one FMA would round once where ATen rounds
// twice.
#pragma once
#include <cstdint>

#include "qvl/kernels/decode_ops.h"
#include "qvl/kernels/simd_portable.h"

namespace qvl::kernels::decode_detail {

// That order on vectors of L::kWidth lanes (n ≥ kWidth), for any tier: L has
// a vector type V, zero(), add(a, b), square(p) (the squares of the kWidth
// values at p, as floats) and store(float*, v). Each tier instantiates it
// with an L of its own anonymous namespace, so no instantiation compiled for
// one tier is ever used by another.
template <class L, class T>
float cascade_sum_of_squares(const T* x, int64_t n) {
  using V = typename L::V;
  constexpr int W = L::kWidth;
  const int64_t vectors = n / W, blocks = vectors / 4;
  V acc[4][4];  // [level][stream]
  for (auto& level : acc)
    for (V& v : level) v = L::zero();
  const auto add_block = [&](int64_t block) {
    for (int k = 0; k < 4; ++k) acc[0][k] = L::add(acc[0][k], L::square(x + (block * 4 + k) * W));
  };
  int64_t block = 0;
  while (block + 16 <= blocks) {
    for (int j = 0; j < 16; ++j) add_block(block++);
    for (int level = 1; level < 4; ++level) {
      for (int k = 0; k < 4; ++k) {
        acc[level][k] = L::add(acc[level][k], acc[level - 1][k]);
        acc[level - 1][k] = L::zero();
      }
      if ((block & (int64_t(15) << (4 * level))) != 0) break;
    }
  }
  for (; block < blocks; ++block) add_block(block);
  for (int level = 1; level < 4; ++level)
    for (int k = 0; k < 4; ++k) acc[0][k] = L::add(acc[0][k], acc[level][k]);
  for (int64_t v = blocks * 4; v < vectors; ++v) acc[0][0] = L::add(acc[0][0], L::square(x + v * W));
  V streams = acc[0][0];
  for (int k = 1; k < 4; ++k) streams = L::add(streams, acc[0][k]);
  float lanes[W];
  L::store(lanes, streams);
  float total = 0;
  for (int64_t i = vectors * W; i < n; ++i) {
    const float v = simd_portable::load(x, i);
    total += v * v;
  }
  for (int l = 0; l < W; ++l) total += lanes[l];
  return total;
}

struct NormJob {
  Storage storage;
  const void* x;
  const void* weight;
  void* y;
  int64_t cols;
  float eps;
  int lanes;  // sum_lanes
};

struct HeadRopeJob {
  Storage storage;
  const void* x;
  const void* weight;
  const float* cos;
  const float* sin;
  void* y;
  int64_t heads, head_dim;
  float eps;
  int lanes;
};

struct AttentionJob {
  Storage storage;
  const void* q;
  const KvSequence* sequences;
  AttentionShape shape;
  float scale;  // 1/sqrt(head_dim) as ATen applies it: a float multiply after the dot
  void* out;
};

// Largest query-head group and head_dim the attention kernels support.
constexpr int64_t kMaxGroup = 8;
constexpr int64_t kMaxHeadDim = 256;

// One tier's versions of the kernels, each on a range of the work.
struct DecodeKernels {
  void (*rms_norm_rows)(const NormJob& job, int64_t row_begin, int64_t row_end);
  // Rows are (token, head) pairs: row r is token r / heads.
  void (*head_norm_rope_rows)(const HeadRopeJob& job, int64_t row_begin, int64_t row_end);
  // One (sequence, kv head) pair: pair = b · kv_heads + g. scratch holds
  // group · visible floats.
  void (*attend_pair)(const AttentionJob& job, int64_t pair, float* scratch);
  void (*silu_mul)(Storage s, void* gate, const void* up, int64_t begin, int64_t end);
  // Optional (nullptr: none), 2 query heads per kv head and head_dim 128
  // only: sequences b and b + 1, which share one cache and see va <= vb
  // positions, on kv head g, with attend_pair's bits. scratch holds
  // 2 · (va + vb) floats.
  void (*attend_two)(const AttentionJob& job, int64_t b, int64_t g, float* scratch) = nullptr;
};

// The kernels of `isa`'s tier (neon runs the portable ones). Throws
// qvl::Error, naming `caller`, when this CPU cannot run that tier.
const DecodeKernels& decode_kernels(Isa isa, const char* caller);

extern const DecodeKernels kDecodePortable;
#if QVL_X86
extern const DecodeKernels kDecodeAvx2;    // entered only when the CPU has AVX2+FMA+F16C
extern const DecodeKernels kDecodeAvx512;  // entered only when the CPU has AVX-512 F+BW+VL+DQ
#endif

}  // namespace qvl::kernels::decode_detail
