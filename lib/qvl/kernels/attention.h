// The vision tower's attention in one pass per block of queries: scores
// against every key of the image, softmax and the weighted sum of the values,
// with no score matrix in memory and no matmul library call per small block.
//
// Flash-attention style: for a tile of queries the keys are taken in blocks;
// each block's scores, their softmax terms (against the running maximum, the
// earlier sums and outputs rescaled when the maximum grows) and their share
// of the output are computed while the block is in L1. Lanes run over
// queries, so the row maxima and sums are vertical operations.
//
// Numerics: scores, softmax and the output sums are float32 whatever the
// storage; the softmax is exp((score - max) · scale) with the vision kernels'
// exp (simd_portable.h), and the output is rounded once to the storage. On
// the avx512 tier with AVX512-BF16 and bf16 storage the products run in
// vdpbf16ps (bf16 operands, float32 sums): the softmax weights are rounded to
// bf16 before they multiply the values (as the reference's bf16 softmax
// output is), and the normalizing sum adds the rounded weights. Every other
// case multiplies in float32 (FMA on avx2/avx512, separate multiply and add
// in the portable code).
//
// int8 scores (AttentionScores::Int8, for int8 vision): each row of q and of
// k (one token in one head) is quantized symmetrically, scale = max|x| / 127,
// values round-half-even(x · (127 / max|x|)) in -127..127 (0 for a row of
// zeros; a NaN becomes -127), so q·k is an exact int32 on
// every tier (vpdpbusd on avx512 with AVX512-VNNI, vpmaddubsw on avx2 and on
// avx512 without VNNI, plain integers in the portable code), and the score
// float(dot) · (q_scale · k_scale) is the same float on every tier. Softmax
// and the weighted sum of the values stay as above: the softmax weights of a
// thousand keys are mostly tiny, 8 bits would lose them.
#pragma once
#include <cstdint>

#include "qvl/kernels/storage.h"  // Storage, Isa, active_isa

namespace qvl::kernels {

// How the scores q·k are computed (above).
enum class AttentionScores { Float, Int8 };

// q, k and v are [heads, tokens, head_dim], out is [tokens, heads, head_dim],
// all of storage s.
struct AttentionTensors {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  int64_t tokens, heads, head_dim;
  AttentionScores scores = AttentionScores::Float;
};

// One piece of work: queries [query_begin, query_begin + queries) of the
// sequence (image) of tokens [start, start + length), in head `head`, attend
// to all the keys of that sequence. Query indices are relative to start.
struct AttentionBlock {
  int64_t head, start, length, query_begin, queries;
};

// Writes the rows of `out` of that block's queries in that head. Runs on the
// calling thread (the caller splits blocks across threads: blocks never write
// the same output). Throws qvl::Error if this CPU cannot run `isa`, or if the
// block lies outside the tensors.
void attend_block(Storage s, const AttentionTensors& t, const AttentionBlock& block, float scale,
                  Isa isa = active_isa());

}  // namespace qvl::kernels
