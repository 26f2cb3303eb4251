// The math of one Qwen3-VL text decoder layer:
//   h = x + o_proj(attention(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))), v_proj(rms(x))))
//   out = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))
// Attention is causal over the cached tokens plus the new ones, with grouped
// query heads (each key/value head serves num_attention_heads/num_key_value_heads
// query heads).
#pragma once
#include <ATen/ATen.h>

#include <vector>

#include "qvl/decoder/kv_cache.h"
#include "qvl/decoder/rope.h"
#include "qvl/decoder/weights.h"
#include "qvl/model/config.h"

namespace qvl {

// x / rms(x) * weight over the last dimension, normalised in float32 and
// rounded back to x's dtype before the weight is applied (as the reference does).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Output buffers of the projections, sized for the longest pass so far and
// shared by all layers: a decode step after the first allocates none of them.
class LayerWorkspace {
 public:
  LayerWorkspace(const TextConfig& cfg, at::ScalarType dtype);
  struct Views {
    at::Tensor q, k, v, attn;  // [L, heads * head_dim] / [L, kv_heads * head_dim]
    at::Tensor o, down;        // [L, hidden]
    at::Tensor gate, up;       // [L, intermediate]
  };
  Views rows(int64_t tokens);
  // Where int8 weights are dequantized for long inputs (see tensor::linear_into).
  at::Tensor& dequant_scratch() { return dequant_scratch_; }

 private:
  void allocate(int64_t tokens);
  TextConfig cfg_;
  at::ScalarType dtype_;
  int64_t capacity_ = 0;
  Views full_;
  at::Tensor dequant_scratch_;
};

// Consecutive rows of a layer's input that extend one sequence: they follow
// the tokens already in `cache` and attend only to that sequence.
struct SequenceRows {
  KvCache* cache;
  int64_t rows;
};

// Runs layer `layer_index` on hidden [L, hidden], whose rows are split into
// sequences (one sequence for a prompt; one row per sequence in a batched
// decode step). Each sequence's new keys and values go into its cache after
// the tokens it holds (the caller commits them once every layer has run).
// The projections see all L rows at once, so a batch reads each weight once.
// Returns the new hidden states.
at::Tensor run_decoder_layer(const at::Tensor& hidden, const LayerWeights& w, const TextConfig& cfg,
                             const RopeTables& rope, const std::vector<SequenceRows>& sequences,
                             int64_t layer_index, LayerWorkspace& ws);

}  // namespace qvl
