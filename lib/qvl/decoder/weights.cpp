#include "qvl/decoder/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <iterator>

#include "qvl/decoder/int4_weights.h"
#include "qvl/decoder/int8_weights.h"
#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"
#include "qvl/kernels/parallel.h"
#include "qvl/model/checkpoint_layout.h"

namespace qvl {
namespace {

bool is_float(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

// The name of a layer's projection in the int8 and int4 caches.
std::string int8_name(int64_t layer, const char* projection) { return fmt::format("layers.{}.{}", layer, projection); }
constexpr const char* kInt8LmHead = "lm_head";
constexpr const char* kProjections[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

}  // namespace

DecoderWeights::DecoderWeights(const Checkpoint& ckpt, const TextConfig& cfg, const DecoderOptions& opts)
    : ckpt_(ckpt), dtype_(opts.dtype), lazy_(opts.lazy), tied_(cfg.tie_word_embeddings) {
  if (dtype_ != at::kBFloat16 && dtype_ != at::kFloat)
    throw Error(fmt::format("decoder compute dtype {} is not supported (bf16 or f32)", c10::toString(dtype_)));
  const TextGlobalTensors globals = text_global_tensors(cfg);
  embed_src_ = require(globals.embed_tokens);
  norm_src_ = require(globals.final_norm);
  lm_head_src_ = tied_ ? embed_src_ : require(globals.lm_head);

  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const TextLayerTensors t = text_layer_tensors(cfg, i);
    LayerSources s;
    s.input_norm = require(t.input_norm);
    s.post_attention_norm = require(t.post_attention_norm);
    s.q_proj = require(t.q_proj);
    s.k_proj = require(t.k_proj);
    s.v_proj = require(t.v_proj);
    s.o_proj = require(t.o_proj);
    if (cfg.attention_bias) {
      s.q_bias = require(t.q_bias);
      s.k_bias = require(t.k_bias);
      s.v_bias = require(t.v_bias);
      s.o_bias = require(t.o_bias);
    }
    s.q_norm = require(t.q_norm);
    s.k_norm = require(t.k_norm);
    s.gate_proj = require(t.gate_proj);
    s.up_proj = require(t.up_proj);
    s.down_proj = require(t.down_proj);
    layer_srcs_.push_back(s);
  }
  layers_.resize(layer_srcs_.size());
  layer_loaded_.assign(layer_srcs_.size(), false);

  if (opts.quant != WeightQuant::None) {
    std::vector<QuantSource> sources;
    for (size_t i = 0; i < layer_srcs_.size(); ++i) {
      const LayerSources& s = layer_srcs_[i];
      const Source* projections[] = {&s.q_proj, &s.k_proj, &s.v_proj, &s.o_proj, &s.gate_proj, &s.up_proj, &s.down_proj};
      for (size_t p = 0; p < std::size(kProjections); ++p)
        sources.push_back({int8_name(int64_t(i), kProjections[p]), projections[p]->view});
    }
    sources.push_back({kInt8LmHead, lm_head_src_.view});
    if (opts.quant == WeightQuant::Int8)
      int8_ = load_int8_cache(ckpt, sources, opts.quant_cache_dir, opts.int8_group_size, opts.on_note);
    else
      int4_ = load_int4_cache(ckpt, sources, opts.quant_cache_dir, opts.on_note);
  }

  if (!lazy_) {
    // Filling page tables is CPU work, not disk work (~0.07 s per GB of small
    // page-cache pages), and ready waits for it: every thread, full priority.
    const int threads = opts.populate_threads > 0 ? opts.populate_threads : kernels::max_threads();
    populate_all(PrefetchOptions{threads, 0});
    load_globals();
    for (size_t i = 0; i < layers_.size(); ++i) load_layer(static_cast<int64_t>(i));
  } else if (opts.prefetch) {
    // One thread at nice +10: it fills the core the single-threaded work after
    // ready leaves idle and yields to everything else. Two threads at full
    // priority were tried for the warm prompt-cache question (docs/PERFORMANCE.md,
    // "Start-up: populating the decoder's pages"): what the prefill gained, the
    // image decoding and the prompt-cache load lost.
    prefetch_ = std::make_unique<PagePrefetcher>(forward_byte_order(), PrefetchOptions{1, 10});
  }
}

void DecoderWeights::populate_all(const PrefetchOptions& populate) {
  std::vector<ByteRange> order = forward_byte_order();
  // Eager also reads the whole embedding table now when it is not the lm_head (and not quantized).
  if (!tied_ && !quantized() && embed_src_.view) order.push_back({embed_src_.view->data, embed_src_.view->nbytes});
  PagePrefetcher all(std::move(order), populate);
  all.wait();
  // Touching such a page would have raised SIGBUS.
  if (all.error() != 0)
    throw Error(fmt::format("cannot read the decoder weights: {} (a weight file shrank or changed while it was "
                            "being loaded)",
                            std::strerror(all.error())));
}

std::vector<ByteRange> DecoderWeights::forward_byte_order() const {
  std::vector<ByteRange> order;
  // Small tensors are read from the file, not the mapping (torch_view.h).
  auto add = [&](const Source& s) {
    if (s.view && !tensor_is_copied(*s.view)) order.push_back({s.view->data, s.view->nbytes});
  };
  // A quantized projection is read from its cache file, never from the checkpoint.
  auto add_projection = [&](const Source& s, const std::string& name) {
    if (int4_) {
      const kernels::Int4Matrix& m = int4_->get(name);
      order.push_back({m.levels, m.level_bytes()});
      order.push_back({m.params, m.param_bytes()});
    } else if (int8_) {
      const kernels::Int8Matrix& m = int8_->get(name);
      order.push_back({m.weights, m.weight_bytes()});
      order.push_back({m.scales, m.scale_bytes()});
    } else {
      add(s);
    }
  };
  for (size_t i = 0; i < layer_srcs_.size(); ++i) {
    const LayerSources& s = layer_srcs_[i];
    const int64_t layer = int64_t(i);
    for (const Source* small : {&s.input_norm, &s.post_attention_norm, &s.q_bias, &s.k_bias, &s.v_bias, &s.o_bias,
                                &s.q_norm, &s.k_norm})
      add(*small);
    add_projection(s.q_proj, int8_name(layer, "q_proj"));
    add_projection(s.k_proj, int8_name(layer, "k_proj"));
    add_projection(s.v_proj, int8_name(layer, "v_proj"));
    add_projection(s.o_proj, int8_name(layer, "o_proj"));
    add_projection(s.gate_proj, int8_name(layer, "gate_proj"));
    add_projection(s.up_proj, int8_name(layer, "up_proj"));
    add_projection(s.down_proj, int8_name(layer, "down_proj"));
  }
  add(norm_src_);
  // The embedding table serves lookups of a few rows; whole, it is read only
  // as the (tied) lm_head, after the last layer.
  add_projection(lm_head_src_, kInt8LmHead);
  return order;
}

DecoderWeights::Source DecoderWeights::require(const ExpectedTensor& tensor) {
  const std::string& name = tensor.name;
  const std::vector<int64_t>& shape = tensor.shape;
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
  return s;
}

at::Tensor DecoderWeights::materialize(const Source& s) const {
  if (!s.view) return at::Tensor();
  at::Tensor view = tensor_view(*s.view);
  if (view.scalar_type() != dtype_) return view.to(dtype_);
  return view;
}

tensor::LinearWeight DecoderWeights::projection(const Source& s, const std::string& name) const {
  if (int4_) {
    return tensor::LinearWeight(int4_->get(name));
  }
  if (!int8_) return materialize(s);
  return tensor::LinearWeight(int8_->get(name));
}

void DecoderWeights::load_globals() {
  if (globals_loaded_) return;
  norm_ = materialize(norm_src_);
  if (quantized()) {
    // The table serves only lookups of a few rows, which embedding_rows reads
    // from the file: it is neither mapped nor converted whole.
    lm_head_ = projection(lm_head_src_, kInt8LmHead);
  } else {
    embed_ = materialize(embed_src_);
    lm_head_ = tied_ ? tensor::LinearWeight(embed_) : projection(lm_head_src_, kInt8LmHead);
  }
  globals_loaded_ = true;
}

void DecoderWeights::load_layer(int64_t i) {
  const LayerSources& s = layer_srcs_[i];
  LayerWeights& w = layers_[i];
  w.input_norm = materialize(s.input_norm);
  w.post_attention_norm = materialize(s.post_attention_norm);
  w.q_proj = projection(s.q_proj, int8_name(i, "q_proj"));
  w.k_proj = projection(s.k_proj, int8_name(i, "k_proj"));
  w.v_proj = projection(s.v_proj, int8_name(i, "v_proj"));
  w.o_proj = projection(s.o_proj, int8_name(i, "o_proj"));
  w.q_bias = materialize(s.q_bias);
  w.k_bias = materialize(s.k_bias);
  w.v_bias = materialize(s.v_bias);
  w.o_bias = materialize(s.o_bias);
  w.q_norm = materialize(s.q_norm);
  w.k_norm = materialize(s.k_norm);
  w.gate_proj = projection(s.gate_proj, int8_name(i, "gate_proj"));
  w.up_proj = projection(s.up_proj, int8_name(i, "up_proj"));
  w.down_proj = projection(s.down_proj, int8_name(i, "down_proj"));
  layer_loaded_[i] = true;
}

at::Tensor DecoderWeights::embedding_rows(const std::vector<int32_t>& ids) {
  if (quantized()) {
    // The table is not the lm_head here, and a lookup needs a few rows: they
    // are read from the file, so that each lookup does not map the page-cache
    // folio around its row (up to 2 MB) into this process (torch_view.h).
    const TensorView& table = *embed_src_.view;
    const int64_t hidden = table.shape.at(1);
    const size_t row_bytes = size_t(hidden) * dtype_size(table.dtype);
    at::Tensor rows =
        at::empty({int64_t(ids.size()), hidden}, at::TensorOptions().dtype(to_scalar_type(table.dtype)));
    auto* out = static_cast<uint8_t*>(rows.data_ptr());
    for (size_t i = 0; i < ids.size(); ++i) table.read_bytes(size_t(ids[i]) * row_bytes, row_bytes, out + i * row_bytes);
    return rows.to(dtype_);
  }
  load_globals();
  return embed_.index_select(0, at::tensor(ids, at::kInt).to(at::kLong));
}

const at::Tensor& DecoderWeights::final_norm() {
  load_globals();
  return norm_;
}

const tensor::LinearWeight& DecoderWeights::lm_head() {
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
