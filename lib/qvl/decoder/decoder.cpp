#include "qvl/decoder/decoder.h"

#include <fmt/format.h>

#include "qvl/decoder/kv_cache.h"
#include "qvl/decoder/layer.h"
#include "qvl/decoder/rope.h"
#include "qvl/decoder/weights.h"
#include "qvl/error.h"
#include "qvl/tensor/aten_backends.h"
#include "qvl/tensor/linear.h"

namespace qvl {
namespace {

std::string shape_of(const at::Tensor& t) {
  return t.defined() ? fmt::format("[{}]", fmt::join(t.sizes(), ", ")) : "undefined";
}

void check_forward_inputs(const at::Tensor& embeds, const at::Tensor& positions, const DeepstackInput* deepstack,
                          const TextConfig& cfg) {
  if (!embeds.defined() || embeds.dim() != 2 || embeds.size(0) == 0 || embeds.size(1) != cfg.hidden_size)
    throw Error(fmt::format("decoder input embeddings have shape {}, expected [L, {}] with L > 0", shape_of(embeds),
                            cfg.hidden_size));
  const int64_t L = embeds.size(0);
  if (!positions.defined() || positions.dim() != 2 || positions.size(0) != 3 || positions.size(1) != L)
    throw Error(fmt::format("decoder position ids have shape {}, expected [3, {}]", shape_of(positions), L));
  if (!deepstack) return;
  const at::Tensor& mask = deepstack->visual_mask;
  if (!mask.defined() || mask.dim() != 1 || mask.size(0) != L)
    throw Error(fmt::format("deepstack visual mask has shape {}, expected [{}]", shape_of(mask), L));
  if (static_cast<int64_t>(deepstack->features.size()) > cfg.num_hidden_layers)
    throw Error(fmt::format("{} deepstack features but the decoder has only {} layers", deepstack->features.size(),
                            cfg.num_hidden_layers));
  const int64_t visual = mask.to(at::kLong).sum().item<int64_t>();
  for (size_t i = 0; i < deepstack->features.size(); ++i) {
    const at::Tensor& f = deepstack->features[i];
    if (!f.defined() || f.dim() != 2 || f.size(0) != visual || f.size(1) != cfg.hidden_size)
      throw Error(fmt::format("deepstack feature {} has shape {}, expected [{}, {}] (one row per image token)", i,
                              shape_of(f), visual, cfg.hidden_size));
  }
}

}  // namespace

Decoder::Decoder(const Checkpoint& ckpt, const TextConfig& cfg, const DecoderOptions& opts) : cfg_(cfg), opts_(opts) {
  if (cfg.hidden_act != "silu")
    throw Error(fmt::format("text hidden_act '{}' is not supported (qvl implements silu)", cfg.hidden_act));
  if (cfg.num_key_value_heads <= 0 || cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    throw Error(fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}",
                            cfg.num_attention_heads, cfg.num_key_value_heads));
  tensor::configure_aten_backends();
  weights_ = std::make_unique<DecoderWeights>(ckpt, cfg, opts);
  rope_ = std::make_unique<MultimodalRope>(cfg);
  set_sequences(1);
  workspace_ = std::make_unique<LayerWorkspace>(cfg, opts.dtype);
}

Decoder::~Decoder() = default;

void Decoder::set_sequences(int64_t n) {
  if (n < 1) throw Error(fmt::format("the decoder needs at least one sequence, got {}", n));
  while (int64_t(caches_.size()) > n) caches_.pop_back();
  // A cache allocates its buffers as its sequence grows (kv_cache.h).
  while (int64_t(caches_.size()) < n)
    caches_.push_back(std::make_unique<KvCache>(cfg_.num_hidden_layers, cfg_.num_key_value_heads, cfg_.head_dim,
                                                opts_.max_context, opts_.dtype));
}

KvCache& Decoder::cache(int64_t sequence) const {
  if (sequence < 0 || sequence >= int64_t(caches_.size()))
    throw Error(fmt::format("sequence {} does not exist (the decoder has {})", sequence, caches_.size()));
  return *caches_[size_t(sequence)];
}

at::Tensor Decoder::embed(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= cfg_.vocab_size)
      throw Error(fmt::format("token id {} is outside the vocabulary (0..{})", id, cfg_.vocab_size - 1));
  return weights_->embedding_rows(ids);
}

at::Tensor Decoder::run_layers(at::Tensor hidden, const at::Tensor& positions, const std::vector<SequenceRows>& parts,
                               const DeepstackInput* deepstack, ForwardTrace* trace) {
  for (const SequenceRows& part : parts) part.cache->reserve(part.rows);
  hidden = hidden.to(opts_.dtype).contiguous();
  const RopeTables rope = rope_->tables(positions.to(at::kLong));
  at::Tensor visual_rows;
  if (deepstack && !deepstack->features.empty())
    visual_rows = deepstack->visual_mask.to(at::kBool).nonzero().squeeze(1);
  if (trace) trace->hidden_states = {hidden};

  const int64_t n_layers = cfg_.num_hidden_layers;
  for (int64_t i = 0; i < n_layers; ++i) {
    // run_decoder_layer returns a fresh tensor, so the trace can keep it as is.
    hidden = run_decoder_layer(hidden, weights_->layer(i), cfg_, rope, parts, i, *workspace_);
    if (trace && i + 1 < n_layers) trace->hidden_states.push_back(hidden);
    if (visual_rows.defined() && i < static_cast<int64_t>(deepstack->features.size()))
      hidden = hidden.index_add(0, visual_rows, deepstack->features[i].to(opts_.dtype));
  }
  for (const SequenceRows& part : parts) part.cache->commit(part.rows);

  at::Tensor normed = rms_norm(hidden, weights_->final_norm(), cfg_.rms_norm_eps);
  if (trace) trace->hidden_states.push_back(normed);
  return normed;
}

at::Tensor Decoder::prefill(int64_t sequence, const at::Tensor& embeds, const at::Tensor& positions,
                            const DeepstackInput* deepstack, bool all_logits, ForwardTrace* trace) {
  check_forward_inputs(embeds, positions, deepstack, cfg_);
  const int64_t L = embeds.size(0);
  at::Tensor normed = run_layers(embeds, positions, {{&cache(sequence), L}}, deepstack, trace);
  if (all_logits) {  // tests and tools only: not worth keeping an [L, vocab] buffer
    at::Tensor logits = at::empty({L, cfg_.vocab_size}, at::TensorOptions().dtype(opts_.dtype));
    tensor::linear_into(logits, normed, weights_->lm_head(), {}, workspace_->dequant_scratch());
    return logits.to(at::kFloat);
  }
  return logits_of(normed.narrow(0, L - 1, 1)).squeeze(0);
}

at::Tensor Decoder::decode(const std::vector<int64_t>& sequences, const std::vector<int32_t>& tokens,
                           const std::vector<int64_t>& positions) {
  const int64_t B = int64_t(sequences.size());
  if (B == 0 || int64_t(tokens.size()) != B || int64_t(positions.size()) != B)
    throw Error(fmt::format("a decode step needs one token and one position per sequence, got {} sequences, {} "
                            "tokens, {} positions",
                            sequences.size(), tokens.size(), positions.size()));
  std::vector<SequenceRows> parts;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t j = 0; j < i; ++j)
      if (sequences[size_t(j)] == sequences[size_t(i)])
        throw Error(fmt::format("sequence {} appears twice in one decode step", sequences[size_t(i)]));
    parts.push_back({&cache(sequences[size_t(i)]), 1});
  }
  at::Tensor pos = at::tensor(positions, at::kLong).unsqueeze(0).expand({3, B});
  return logits_of(run_layers(embed(tokens), pos, parts, nullptr, nullptr));
}

at::Tensor Decoder::logits_of(const at::Tensor& normed) {
  const int64_t rows = normed.size(0);
  if (!logits_buffer_.defined() || logits_buffer_.size(0) != rows)
    logits_buffer_ = at::empty({rows, cfg_.vocab_size}, at::TensorOptions().dtype(opts_.dtype));
  // One row per sequence (a prompt's last, or a decode step's).
  tensor::linear_into(logits_buffer_, normed, weights_->lm_head(), {}, workspace_->dequant_scratch(),
                      tensor::Rows::Sequences);
  // A copy: the buffer is reused by the next call.
  return logits_buffer_.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

int64_t Decoder::cached(int64_t sequence) const { return cache(sequence).size(); }

void Decoder::truncate(int64_t n_tokens, int64_t sequence) { cache(sequence).truncate(n_tokens); }

void Decoder::reset() {
  for (auto& c : caches_) c->reset();
}

void Decoder::reset_sequence(int64_t sequence) { cache(sequence).reset(); }

at::Tensor Decoder::cached_keys(int64_t layer, int64_t n, int64_t sequence) const {
  KvCache& c = cache(sequence);
  if (layer < 0 || layer >= cfg_.num_hidden_layers || n < 0 || n > c.size())
    throw Error(fmt::format("no cached keys for layer {} and {} tokens (the sequence holds {})", layer, n, c.size()));
  return c.keys(layer, n);
}

at::Tensor Decoder::cached_values(int64_t layer, int64_t n, int64_t sequence) const {
  KvCache& c = cache(sequence);
  if (layer < 0 || layer >= cfg_.num_hidden_layers || n < 0 || n > c.size())
    throw Error(fmt::format("no cached values for layer {} and {} tokens (the sequence holds {})", layer, n, c.size()));
  return c.values(layer, n);
}

void Decoder::restore(int64_t sequence, const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values) {
  KvCache& c = cache(sequence);
  if (c.size() != 0) throw Error(fmt::format("cannot restore into sequence {}: it holds {} tokens", sequence, c.size()));
  const int64_t layers = cfg_.num_hidden_layers;
  if (int64_t(keys.size()) != layers || int64_t(values.size()) != layers)
    throw Error(fmt::format("restoring a cache needs keys and values for {} layers, got {} and {}", layers,
                            keys.size(), values.size()));
  const int64_t n = keys[0].dim() == 3 ? keys[0].size(1) : -1;
  for (int64_t i = 0; i < layers; ++i)
    for (const at::Tensor* t : {&keys[size_t(i)], &values[size_t(i)]})
      if (t->dim() != 3 || t->size(0) != cfg_.num_key_value_heads || t->size(1) != n || t->size(2) != cfg_.head_dim)
        throw Error(fmt::format("restored keys/values of layer {} have shape {}, expected [{}, {}, {}]", i,
                                shape_of(*t), cfg_.num_key_value_heads, n, cfg_.head_dim));
  c.reserve(n);
  for (int64_t i = 0; i < layers; ++i) c.store(i, keys[size_t(i)], values[size_t(i)]);
  c.commit(n);
}

int64_t Decoder::layers_loaded() const { return weights_->layers_loaded(); }

}  // namespace qvl
