#include "qvl/decoder/layer.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>

#include "qvl/kernels/decode_ops.h"
#include "qvl/tensor/aten_sum_order.h"
#include "qvl/tensor/linear.h"

namespace qvl {
namespace {

// The fused kernels of kernels/decode_ops.h take float32 or bf16 tensors that
// are contiguous and share one dtype; anything else takes the ATen route.
std::optional<kernels::Storage> fused_storage(std::initializer_list<const at::Tensor*> tensors) {
  const at::ScalarType dtype = (*tensors.begin())->scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16) return std::nullopt;
  for (const at::Tensor* t : tensors)
    if (t->scalar_type() != dtype || !t->is_contiguous()) return std::nullopt;
  return dtype == at::kFloat ? kernels::Storage::F32 : kernels::Storage::BF16;
}

// Queries handled together in a long prefill: bounds the float32 score matrix
// to kv_heads x group x kQueryBlock x context.
constexpr int64_t kQueryBlock = 256;

// Attention of n queries q [n, heads, head_dim] over keys/values [kv_heads,
// visible, head_dim], the first query sitting at position `first` (queries are
// the last n of the visible tokens). Writes out [n, heads * head_dim].
void attend_block(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, int64_t first,
                  at::Tensor out) {
  const int64_t n = q.size(0), heads = q.size(1), head_dim = q.size(2);
  const int64_t kv_heads = keys.size(0), visible = keys.size(1);
  const int64_t group = heads / kv_heads;
  // Query head h uses key/value head h / group. Stacking each group's queries
  // as rows lets one batched matmul per key/value head do the work without
  // repeating the cache per query head: rows are ordered (g, i).
  at::Tensor grouped = q.view({n, kv_heads, group, head_dim}).permute({1, 2, 0, 3}).reshape({kv_heads, group * n, head_dim});
  // Scores stay float32 even for a bf16 cache: rounding them to bf16 before the
  // softmax doubled the logits' distance from the reference's bf16 run.
  at::Tensor scores = at::bmm(grouped.to(at::kFloat), keys.transpose(1, 2).to(at::kFloat));  // [kv, group*n, visible]
  scores.mul_(1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (n > 1) {
    // Query i sits at position first + i and may see keys 0..first + i.
    at::Tensor future = at::ones({n, visible}, at::TensorOptions().dtype(at::kBool)).triu(first + 1);
    scores.view({kv_heads, group, n, visible}).masked_fill_(future, -std::numeric_limits<float>::infinity());
  }
  at::Tensor probs = at::softmax(scores, -1).to(values.scalar_type());
  at::Tensor mixed = tensor::matmul(probs, values);  // [kv, group*n, head_dim]
  out.view({n, kv_heads, group, head_dim}).copy_(mixed.view({kv_heads, group, n, head_dim}).permute({2, 0, 1, 3}));
}

// Causal attention of the L new queries, whose keys/values are already stored
// at cache positions [past, past + L). Writes out [L, heads * head_dim].
// float32 and bf16 go through the fused kernel, each query as a decode step
// computes it: no L × context score matrix, both threads busy (the float32
// bmm below runs on one, OpenBLAS being kept at one thread), about half the
// CPU time on a 502-token prefill (docs/PERFORMANCE.md, "int8 matmuls").
// Other dtypes go through ATen.
void attend(const at::Tensor& q, const KvCache& cache, int64_t layer, int64_t past, at::Tensor& out) {
  const int64_t L = q.size(0);
  const at::Tensor keys = cache.keys(layer, past + L), values = cache.values(layer, past + L);
  if (const std::optional<kernels::Storage> storage = fused_storage({&q, &out});
      storage && keys.scalar_type() == q.scalar_type() && out.dim() == 2 && out.stride(0) == out.size(1)) {
    kernels::causal_attention(*storage, q.data_ptr(), {keys.data_ptr(), values.data_ptr(), cache.capacity(), past + L},
                              L, {q.size(1), keys.size(0), q.size(2)}, out.data_ptr());
    return;
  }
  for (int64_t start = 0; start < L; start += kQueryBlock) {
    const int64_t n = std::min(kQueryBlock, L - start);
    const int64_t visible = past + start + n;
    attend_block(q.narrow(0, start, n), cache.keys(layer, visible), cache.values(layer, visible), past + start,
                 out.narrow(0, start, n));
  }
}

// rms_norm over each head of x [L, heads, head_dim] then the rotary embedding,
// into a new tensor.
at::Tensor norm_and_rope(const at::Tensor& x, const at::Tensor& weight, const RopeTables& rope, double eps) {
  const std::optional<kernels::Storage> storage = fused_storage({&x, &weight});
  if (!storage || !rope.cos.is_contiguous() || !rope.sin.is_contiguous())
    return apply_rope(rms_norm(x, weight, eps), rope);
  at::Tensor y = at::empty_like(x);
  kernels::head_norm_rope(*storage, x.data_ptr(), weight.data_ptr(), rope.cos.data_ptr<float>(),
                          rope.sin.data_ptr<float>(), y.data_ptr(), x.size(0), x.size(1), x.size(2), eps,
                          tensor::aten_sum_lanes());
  return y;
}

// One new token per sequence (a decode step): every query attends its own
// cache in one fused call.
bool attend_decode_step(const at::Tensor& q, const std::vector<SequenceRows>& sequences, int64_t layer,
                        const TextConfig& cfg, at::Tensor& out) {
  const std::optional<kernels::Storage> storage = fused_storage({&q, &out});
  if (!storage) return false;
  std::vector<kernels::KvSequence> caches;
  for (const SequenceRows& seq : sequences) {
    if (seq.rows != 1) return false;
    const KvCache& c = *seq.cache;
    const at::Tensor keys = c.keys(layer, 1), values = c.values(layer, 1);
    if (keys.scalar_type() != q.scalar_type()) return false;
    // The new token's key and value are stored at size(), not yet committed.
    caches.push_back({keys.data_ptr(), values.data_ptr(), c.capacity(), c.size() + 1});
  }
  kernels::decode_attention(*storage, q.data_ptr(), caches.data(), int64_t(caches.size()),
                            {cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim}, out.data_ptr());
  return true;
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (const std::optional<kernels::Storage> storage = fused_storage({&x, &weight})) {
    at::Tensor y = at::empty_like(x);
    const int64_t cols = x.size(-1);
    kernels::rms_norm_rows(*storage, x.data_ptr(), weight.data_ptr(), y.data_ptr(), x.numel() / cols, cols, eps,
                           tensor::aten_sum_lanes());
    return y;
  }
  at::Tensor xf = x.to(at::kFloat);  // x itself when already float32: not to be written
  at::Tensor inv_rms = at::rsqrt(xf.square().mean(-1, /*keepdim=*/true).add_(eps));
  return (xf * inv_rms).to(x.scalar_type()) * weight;
}

LayerWorkspace::LayerWorkspace(const TextConfig& cfg, at::ScalarType dtype) : cfg_(cfg), dtype_(dtype) {}

void LayerWorkspace::allocate(int64_t tokens) {
  auto make = [&](int64_t width) { return at::empty({tokens, width}, at::TensorOptions().dtype(dtype_)); };
  const int64_t q_dim = cfg_.num_attention_heads * cfg_.head_dim;
  const int64_t kv_dim = cfg_.num_key_value_heads * cfg_.head_dim;
  full_ = {make(q_dim), make(kv_dim), make(kv_dim), make(q_dim), make(cfg_.hidden_size), make(cfg_.hidden_size),
           make(cfg_.intermediate_size), make(cfg_.intermediate_size)};
  capacity_ = tokens;
}

LayerWorkspace::Views LayerWorkspace::rows(int64_t tokens) {
  if (tokens > capacity_) allocate(tokens);
  auto first = [&](const at::Tensor& t) { return t.narrow(0, 0, tokens); };
  return {first(full_.q), first(full_.k), first(full_.v), first(full_.attn),
          first(full_.o), first(full_.down), first(full_.gate), first(full_.up)};
}

at::Tensor run_decoder_layer(const at::Tensor& hidden, const LayerWeights& w, const TextConfig& cfg,
                             const RopeTables& rope, const std::vector<SequenceRows>& sequences,
                             int64_t layer_index, LayerWorkspace& ws) {
  const int64_t L = hidden.size(0), head_dim = cfg.head_dim;
  const int64_t heads = cfg.num_attention_heads, kv_heads = cfg.num_key_value_heads;
  LayerWorkspace::Views b = ws.rows(L);
  at::Tensor& scratch = ws.dequant_scratch();
  // Several sequences (a batched decode step): each gets what it gets alone.
  const tensor::Rows kind = sequences.size() > 1 ? tensor::Rows::Sequences : tensor::Rows::Prompt;

  at::Tensor x = rms_norm(hidden, w.input_norm, cfg.rms_norm_eps);
  tensor::linear_into(b.q, x, w.q_proj, w.q_bias, scratch, kind);
  tensor::linear_into(b.k, x, w.k_proj, w.k_bias, scratch, kind);
  tensor::linear_into(b.v, x, w.v_proj, w.v_bias, scratch, kind);
  at::Tensor q = norm_and_rope(b.q.view({L, heads, head_dim}), w.q_norm, rope, cfg.rms_norm_eps);
  at::Tensor k = norm_and_rope(b.k.view({L, kv_heads, head_dim}), w.k_norm, rope, cfg.rms_norm_eps);
  at::Tensor v = b.v.view({L, kv_heads, head_dim});
  int64_t first = 0;
  for (const SequenceRows& seq : sequences) {
    seq.cache->store(layer_index, k.narrow(0, first, seq.rows).transpose(0, 1),
                     v.narrow(0, first, seq.rows).transpose(0, 1));
    first += seq.rows;
  }
  if (!attend_decode_step(q, sequences, layer_index, cfg, b.attn)) {
    first = 0;
    for (const SequenceRows& seq : sequences) {
      at::Tensor out = b.attn.narrow(0, first, seq.rows);
      attend(q.narrow(0, first, seq.rows), *seq.cache, layer_index, seq.cache->size(), out);
      first += seq.rows;
    }
  }
  tensor::linear_into(b.o, b.attn, w.o_proj, w.o_bias, scratch, kind);
  at::Tensor h = hidden + b.o;

  x = rms_norm(h, w.post_attention_norm, cfg.rms_norm_eps);
  tensor::linear_into(b.gate, x, w.gate_proj, {}, scratch, kind);
  tensor::linear_into(b.up, x, w.up_proj, {}, scratch, kind);
  if (const std::optional<kernels::Storage> storage = fused_storage({&b.gate, &b.up}))
    kernels::silu_mul(*storage, b.gate.data_ptr(), b.up.data_ptr(), b.gate.numel());
  else
    at::silu_(b.gate).mul_(b.up);
  tensor::linear_into(b.down, b.gate, w.down_proj, {}, scratch, kind);
  return h.add_(b.down);
}

}  // namespace qvl
