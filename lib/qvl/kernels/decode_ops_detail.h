// Internal to the decode kernels: the per-ISA functions decode_ops.cpp
// dispatches to. The AVX-512 ones live in decode_ops_avx512.cpp, the only file
// of these built with AVX-512 flags. Both files are built with
// -ffp-contract=off: a multiply and an add fused into one FMA would round once
// where ATen rounds twice.
#pragma once
#include <cstdint>

#include "qvl/kernels/decode_ops.h"

namespace qvl::kernels::decode_detail {

// Lanes of the vectors ATen's float sum accumulates in (16 when it runs its
// AVX-512 kernels, 8 for AVX2 and the default ones), found once by asking ATen.
int aten_sum_lanes();

// Σ x² over n values of storage s, added in the order of ATen's CPU sum
// (cascade_sum): `lanes` independent running sums fed one vector at a time,
// 4 interleaved streams of vectors whose blocks of 16 roll up through 4
// levels, then the streams, the leftover vectors, the leftover values and
// finally the lanes in turn. ATen sums rows shorter than `lanes` one value at
// a time: the same order with a single lane. The AVX-512 file has a vector
// twin of this.
float aten_sum_of_squares_scalar(Storage s, const void* x, int64_t n, int lanes);

struct NormJob {
  Storage storage;
  const void* x;
  const void* weight;
  void* y;
  int64_t cols;
  float eps;
  int lanes;  // aten_sum_lanes()
};
void rms_norm_rows_scalar(const NormJob& job, int64_t row_begin, int64_t row_end);
void rms_norm_rows_avx512(const NormJob& job, int64_t row_begin, int64_t row_end);

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
// Rows are (token, head) pairs: row r is token r / heads.
void head_norm_rope_rows_scalar(const HeadRopeJob& job, int64_t row_begin, int64_t row_end);
void head_norm_rope_rows_avx512(const HeadRopeJob& job, int64_t row_begin, int64_t row_end);

struct AttentionJob {
  Storage storage;
  const void* q;
  const KvSequence* sequences;
  AttentionShape shape;
  float scale;  // 1/sqrt(head_dim) as ATen applies it: a float multiply after the dot
  void* out;
};
// One (sequence, kv head) pair: pair = b · kv_heads + g. scratch holds
// group · visible floats.
void attend_pair_scalar(const AttentionJob& job, int64_t pair, float* scratch);
void attend_pair_avx512(const AttentionJob& job, int64_t pair, float* scratch);

void silu_mul_scalar(Storage s, void* gate, const void* up, int64_t begin, int64_t end);
void silu_mul_avx512(Storage s, void* gate, const void* up, int64_t begin, int64_t end);
void add_into_scalar(Storage s, void* x, const void* add, int64_t begin, int64_t end);
void add_into_avx512(Storage s, void* x, const void* add, int64_t begin, int64_t end);

// e^x by the polynomial both paths share (a port of it lane by lane is what
// keeps Scalar and Avx512 equal): x clamped to [-87, 88], x = n·ln2 + r,
// e^r by Taylor to r^7 in FMA Horner form, times 2^n.
constexpr float kExpMin = -87.0f, kExpMax = 88.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2High = 0.693145751953125f, kLn2Low = 1.4286068203094172e-06f;
constexpr float kExpTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

}  // namespace qvl::kernels::decode_detail
