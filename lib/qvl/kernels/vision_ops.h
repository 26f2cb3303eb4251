// The element-wise and row-wise work of a vision block, fused where the
// reference does several passes: residual add + LayerNorm, tanh-GELU, softmax
// and the rotary/head split of the qkv projection. Debian's ATen runs these
// with AVX2 kernels in several passes each; at the 2B tower's sizes they cost
// more than the matmuls around them.
//
// Activations are float32 or bfloat16 (raw bits); the arithmetic is always
// float32 and each result is rounded once to the storage type, as ATen does
// for bf16 tensors. Rows are split across the threads (kernels/parallel.h);
// inside a parallel region a call runs on the calling thread.
//
// Every kernel runs the code of tier `isa` (kernels/cpu.h; neon runs the
// portable code) and throws qvl::Error if this CPU cannot run that tier. The
// avx2 and avx512 tiers give the same bits as each other; the portable code
// (no FMA, its own exp evaluation) agrees with them to float rounding.
#pragma once
#include <cstdint>

#include "qvl/kernels/storage.h"  // Storage, Isa, active_isa

namespace qvl::kernels {

// x and y are rows × cols. When `add` is given, x += add first (x is updated
// and rounded to its storage, like the reference's residual add), then
// y = (x - mean) / sqrt(var + eps) · gamma + beta per row.
void add_layer_norm(Storage s, void* x, const void* add, void* y, const float* gamma, const float* beta,
                    int64_t rows, int64_t cols, float eps, Isa isa = active_isa());

// x = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) in place, on n values.
void gelu_tanh(Storage s, void* x, int64_t n, Isa isa = active_isa());

// Each row of x becomes softmax(scale · row), in place.
void softmax_rows(Storage s, void* x, int64_t rows, int64_t cols, float scale, Isa isa = active_isa());

// The qkv projection [tokens, 3, heads, head_dim] split into q, k and v laid
// out [heads, tokens, head_dim]; q and k get the 2-D rotary (computed in
// float32, as the reference does): x·cos + rotate_half(x)·sin, where
// rotate_half(x) = (-x[half:], x[:half]). cos/sin are [tokens, head_dim] float32.
void split_qkv_rotary(Storage s, const void* qkv, const float* cos, const float* sin, int64_t tokens,
                      int64_t heads, int64_t head_dim, void* q, void* k, void* v, Isa isa = active_isa());

// The position embedding added to the patch embeddings, in one pass:
// x[i] += w0·t[i0] + w1·t[i1] + w2·t[i2] + w3·t[i3] per row i, the four
// table rows (`corners` [4, rows] row numbers) and weights ([4, rows]) of the
// bilinear blend, in float32 in that order, and x rounded once to its storage,
// as the reference computes it. x is rows × cols, table has `table_rows` rows
// of cols, both of storage s. The portable code on every tier: it is
// element-wise, so every tier gives the same bits. Throws qvl::Error for a
// corner outside the table.
void add_position_embedding(Storage s, void* x, const void* table, int64_t table_rows, const int64_t* corners,
                            const float* weights, int64_t rows, int64_t cols);

}  // namespace qvl::kernels
