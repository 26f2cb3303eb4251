#include "qvl/decoder/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"

namespace qvl {
namespace {

const std::string kPrefix = "model.language_model.";

bool is_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

// Asks the kernel to read the tensor's pages ahead, then faults each one in, so
// that the first forward pass does not stall on disk.
void prefault(const TensorView& v) {
  if (v.nbytes == 0) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(v.data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(v.data) + v.nbytes;
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);  // advisory: failure is harmless
  volatile uint8_t sink = 0;
  for (uintptr_t p = reinterpret_cast<uintptr_t>(v.data); p < end; p += page) sink ^= *reinterpret_cast<const uint8_t*>(p);
  sink ^= *(v.data + v.nbytes - 1);
  (void)sink;
}

}  // namespace

DecoderWeights::DecoderWeights(const Checkpoint& ckpt, const TextConfig& cfg, at::ScalarType dtype, bool lazy)
    : ckpt_(ckpt), dtype_(dtype), lazy_(lazy), tied_(cfg.tie_word_embeddings) {
  if (dtype != at::kBFloat16 && dtype != at::kFloat)
    throw Error(fmt::format("decoder compute dtype {} is not supported (bf16 or f32)", c10::toString(dtype)));
  const int64_t hidden = cfg.hidden_size, head_dim = cfg.head_dim;
  const int64_t q_dim = cfg.num_attention_heads * head_dim, kv_dim = cfg.num_key_value_heads * head_dim;
  const int64_t inter = cfg.intermediate_size;

  embed_src_ = require(kPrefix + "embed_tokens.weight", {cfg.vocab_size, hidden});
  norm_src_ = require(kPrefix + "norm.weight", {hidden});
  lm_head_src_ = tied_ ? embed_src_ : require("lm_head.weight", {cfg.vocab_size, hidden});

  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = fmt::format("{}layers.{}.", kPrefix, i);
    LayerSources s;
    s.input_norm = require(p + "input_layernorm.weight", {hidden});
    s.post_attention_norm = require(p + "post_attention_layernorm.weight", {hidden});
    s.q_proj = require(p + "self_attn.q_proj.weight", {q_dim, hidden});
    s.k_proj = require(p + "self_attn.k_proj.weight", {kv_dim, hidden});
    s.v_proj = require(p + "self_attn.v_proj.weight", {kv_dim, hidden});
    s.o_proj = require(p + "self_attn.o_proj.weight", {hidden, q_dim});
    if (cfg.attention_bias) {
      s.q_bias = require(p + "self_attn.q_proj.bias", {q_dim});
      s.k_bias = require(p + "self_attn.k_proj.bias", {kv_dim});
      s.v_bias = require(p + "self_attn.v_proj.bias", {kv_dim});
      s.o_bias = require(p + "self_attn.o_proj.bias", {hidden});
    }
    s.q_norm = require(p + "self_attn.q_norm.weight", {head_dim});
    s.k_norm = require(p + "self_attn.k_norm.weight", {head_dim});
    s.gate_proj = require(p + "mlp.gate_proj.weight", {inter, hidden});
    s.up_proj = require(p + "mlp.up_proj.weight", {inter, hidden});
    s.down_proj = require(p + "mlp.down_proj.weight", {hidden, inter});
    layer_srcs_.push_back(s);
  }
  layers_.resize(layer_srcs_.size());
  layer_loaded_.assign(layer_srcs_.size(), false);

  if (!lazy_) {
    load_globals();
    for (size_t i = 0; i < layers_.size(); ++i) load_layer(static_cast<int64_t>(i));
  }
}

DecoderWeights::Source DecoderWeights::require(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView* v = ckpt_.find(name);
  if (!v) throw Error(fmt::format("checkpoint has no tensor '{}' (the text decoder needs it)", name));
  if (v->shape != shape)
    throw Error(fmt::format("{}: tensor '{}' has shape [{}] but the config implies [{}]", v->file, name,
                            fmt::join(v->shape, ", "), fmt::join(shape, ", ")));
  if (!is_float(v->dtype))
    throw Error(fmt::format("{}: tensor '{}' has dtype {}, expected BF16, F16 or F32", v->file, name,
                            dtype_name(v->dtype)));
  Source s;
  s.view = v;
  if (to_scalar_type(v->dtype) != dtype_) in_place_ = false;
  return s;
}

at::Tensor DecoderWeights::materialize(const Source& s) const {
  if (!s.view) return at::Tensor();
  at::Tensor view = tensor_view(*s.view);
  if (view.scalar_type() != dtype_) return view.to(dtype_);  // the copy reads every page anyway
  if (!lazy_) prefault(*s.view);
  return view;
}

void DecoderWeights::load_globals() {
  if (globals_loaded_) return;
  embed_ = materialize(embed_src_);
  norm_ = materialize(norm_src_);
  lm_head_ = tied_ ? embed_ : materialize(lm_head_src_);
  globals_loaded_ = true;
}

void DecoderWeights::load_layer(int64_t i) {
  const LayerSources& s = layer_srcs_[i];
  LayerWeights& w = layers_[i];
  w.input_norm = materialize(s.input_norm);
  w.post_attention_norm = materialize(s.post_attention_norm);
  w.q_proj = materialize(s.q_proj);
  w.k_proj = materialize(s.k_proj);
  w.v_proj = materialize(s.v_proj);
  w.o_proj = materialize(s.o_proj);
  w.q_bias = materialize(s.q_bias);
  w.k_bias = materialize(s.k_bias);
  w.v_bias = materialize(s.v_bias);
  w.o_bias = materialize(s.o_bias);
  w.q_norm = materialize(s.q_norm);
  w.k_norm = materialize(s.k_norm);
  w.gate_proj = materialize(s.gate_proj);
  w.up_proj = materialize(s.up_proj);
  w.down_proj = materialize(s.down_proj);
  layer_loaded_[i] = true;
}

const at::Tensor& DecoderWeights::embed_tokens() {
  load_globals();
  return embed_;
}

const at::Tensor& DecoderWeights::final_norm() {
  load_globals();
  return norm_;
}

const at::Tensor& DecoderWeights::lm_head() {
  load_globals();
  return lm_head_;
}

const LayerWeights& DecoderWeights::layer(int64_t i) {
  if (i < 0 || i >= static_cast<int64_t>(layers_.size()))
    throw Error(fmt::format("decoder layer {} does not exist (the model has {})", i, layers_.size()));
  if (!layer_loaded_[i]) load_layer(i);
  return layers_[i];
}

int64_t DecoderWeights::layers_loaded() const {
  int64_t n = 0;
  for (bool b : layer_loaded_) n += b;
  return n;
}

}  // namespace qvl
