// The non-matmul work of a text decode step, one pass each instead of the
// chain of small allocating ATen ops layer.cpp uses: RMS norm, per-head q/k
// norm fused with the rotary embedding, attention of one new token per
// sequence over its own KV cache and SiLU(gate)·up.
//
// Plain pointers and sizes (no torch headers), so the decoder can hand over
// tensors' data pointers. Activations are float32 or bfloat16 (raw bits); the
// arithmetic is float32 and every rounding to bf16 happens where the ATen
// formulation in layer.cpp / rope.cpp rounds, so the norms and the rotary give
// the same bits as ATen on every tier.
//
// Every kernel runs the code of tier `isa` (kernels/cpu.h; neon runs the
// portable code) and throws qvl::Error if this CPU cannot run that tier. The
// avx2 and avx512 tiers give the same bits as each other on every kernel; the
// portable code, without FMA, may differ from them in the last bits of the
// attention and SiLU (within the tolerances tests/model/test_decode_ops.cpp
// derives).
#pragma once
#include <cstdint>

#include "qvl/kernels/storage.h"  // Storage, Isa, active_isa

namespace qvl::kernels {

// The order of the reference sum the norms reproduce: ATen's CPU float sum
// (cascade_sum) accumulates in vectors of `sum_lanes` floats, 16 when it runs
// its AVX-512 kernels and 8 for AVX2 and its default ones. Which one depends
// on how libtorch was built, the CPU and ATEN_CPU_CAPABILITY, so the torch
// side asks ATen once (tensor/aten_sum_order.h) and passes it in. 1, 8 or 16.
//
// Σ x² over n values in that order: `sum_lanes` running sums fed a vector at
// a time, 4 interleaved streams of vectors whose blocks of 16 roll up through
// 4 levels, then the streams, the leftover vectors, the leftover values and
// finally the lanes in turn (rows shorter than a vector: one value at a time).
// The portable code; every tier's norms add in this order.
float sum_of_squares_in_order(Storage s, const void* x, int64_t n, int sum_lanes);

// y = round(round(x · 1/sqrt(mean(x²) + eps)) · weight) for `rows` rows of
// `cols` values; weight [cols] has the same storage as x. round() is a no-op
// for F32. mean(x²) is summed in the order of ATen's CPU sum on `sum_lanes`
// lanes, so the result equals layer.cpp's rms_norm bit for bit (for cols <
// 32768, where ATen never splits a row across threads). y may be x.
void rms_norm_rows(Storage s, const void* x, const void* weight, void* y, int64_t rows, int64_t cols, double eps,
                   int sum_lanes, Isa isa = active_isa());

// The q (or k) path of attention for one token per row:
//   y = apply_rope(rms_norm(x, weight, eps), cos/sin of the token)
// x and y are [tokens, heads, head_dim] (y may be x), weight [head_dim] in x's
// storage, cos/sin [tokens, head_dim] float32 (RopeTables rows: token t uses
// row t). Same bits as rope.cpp's apply_rope after layer.cpp's rms_norm.
void head_norm_rope(Storage s, const void* x, const void* weight, const float* cos, const float* sin, void* y,
                    int64_t tokens, int64_t heads, int64_t head_dim, double eps, int sum_lanes,
                    Isa isa = active_isa());

// One sequence's cache for one layer, owned elsewhere (KvCache): keys and
// values are [kv_heads, capacity, head_dim] contiguous in the attention's
// storage, and positions [0, visible) are attended (the new token's key and
// value already stored at visible - 1).
struct KvSequence {
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t capacity = 0;
  int64_t visible = 0;
};

struct AttentionShape {
  int64_t heads = 0;     // query heads; head h uses kv head h / (heads / kv_heads)
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// Attention of one query per sequence: q [batch, heads, head_dim], out
// [batch, heads · head_dim], sequences[b] is sequence b's cache. Scores
// q·k/sqrt(head_dim) and the softmax are float32; for BF16 the probabilities
// are rounded to bf16 before Σ p·v (as layer.cpp's probs.to(values dtype)),
// which is accumulated in float32 and rounded once. (sequence, kv head) pairs
// are split over the threads (kernels/parallel.h). Throws qvl::Error on inconsistent shapes.
void decode_attention(Storage s, const void* q, const KvSequence* sequences, int64_t batch,
                      const AttentionShape& shape, void* out, Isa isa = active_isa());

// Causal attention of n new queries of one sequence (a prefill), whose keys
// and values are already stored at cache positions [visible - n, visible):
// query i (q [n, heads, head_dim], out [n, heads · head_dim]) attends
// positions [0, visible - n + i]. Each query is computed exactly as
// decode_attention computes a single one (the same bits as a decode step at
// that position). The (query, kv head) pairs go to the threads short and long
// in turn, in small pieces claimed one after another (kernels/parallel.h), so
// the threads share the causal triangle evenly. Throws qvl::Error on
// inconsistent shapes.
void causal_attention(Storage s, const void* q, const KvSequence& cache, int64_t n, const AttentionShape& shape,
                      void* out, Isa isa = active_isa());

// gate = silu(gate) · up on n values: silu(g) = g / (1 + e^-g) in float32,
// rounded to the storage, then the product, rounded. The exponential is a
// polynomial within a few float ulps (on every tier), so results may sit one
// bf16 step from the exactly rounded value. (ATen 1.13's bf16 at::silu_ rounds
// e^-g and 1 + e^-g to bf16 as well and lands up to ~2 steps away; its float32
// silu is this formula.)
void silu_mul(Storage s, void* gate, const void* up, int64_t n, Isa isa = active_isa());

}  // namespace qvl::kernels
