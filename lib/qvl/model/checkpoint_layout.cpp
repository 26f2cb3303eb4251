#include "qvl/model/checkpoint_layout.h"

#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "qvl/error.h"

namespace qvl {
namespace {

class LayoutBuilder {
 public:
  void add(const std::string& name, std::vector<int64_t> shape) { out_.push_back({name, std::move(shape)}); }
  // A torch nn.Linear stores its weight as [out, in].
  void linear(const std::string& prefix, int64_t in, int64_t out, bool bias) {
    add(prefix + ".weight", {out, in});
    if (bias) add(prefix + ".bias", {out});
  }
  void layer_norm(const std::string& prefix, int64_t dim) {
    add(prefix + ".weight", {dim});
    add(prefix + ".bias", {dim});
  }
  std::vector<ExpectedTensor> take() { return std::move(out_); }

 private:
  std::vector<ExpectedTensor> out_;
};

const std::string kTextRoot = "model.language_model";

void add_text_model(const TextConfig& t, LayoutBuilder& b) {
  const TextGlobalTensors g = text_global_tensors(t);
  b.add(g.embed_tokens.name, g.embed_tokens.shape);
  for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
    const TextLayerTensors l = text_layer_tensors(t, i);
    for (const ExpectedTensor* e : {&l.input_norm, &l.q_proj, &l.q_bias, &l.k_proj, &l.k_bias, &l.v_proj, &l.v_bias,
                                    &l.o_proj, &l.o_bias, &l.q_norm, &l.k_norm, &l.post_attention_norm, &l.gate_proj,
                                    &l.up_proj, &l.down_proj})
      if (!e->name.empty()) b.add(e->name, e->shape);
  }
  b.add(g.final_norm.name, g.final_norm.shape);
}

// The final merger normalises each patch before the merge window is flattened;
// the deepstack mergers normalise after, so their norm spans the whole window.
void add_patch_merger(const VisionConfig& v, const std::string& prefix, bool norm_after_merge,
                      LayoutBuilder& b) {
  const int64_t merged = v.hidden_size * v.spatial_merge_size * v.spatial_merge_size;
  b.layer_norm(prefix + ".norm", norm_after_merge ? merged : v.hidden_size);
  b.linear(prefix + ".linear_fc1", merged, merged, true);
  b.linear(prefix + ".linear_fc2", merged, v.out_hidden_size, true);
}

void add_vision_model(const VisionConfig& v, LayoutBuilder& b) {
  const std::string root = "model.visual";
  // patch_embed is a Conv3d whose stride equals its kernel: one kernel per patch.
  b.add(root + ".patch_embed.proj.weight",
        {v.hidden_size, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size});
  b.add(root + ".patch_embed.proj.bias", {v.hidden_size});
  b.add(root + ".pos_embed.weight", {v.num_position_embeddings, v.hidden_size});
  for (int64_t i = 0; i < v.depth; ++i) {
    const std::string block = root + ".blocks." + std::to_string(i);
    b.layer_norm(block + ".norm1", v.hidden_size);
    b.linear(block + ".attn.qkv", v.hidden_size, 3 * v.hidden_size, true);
    b.linear(block + ".attn.proj", v.hidden_size, v.hidden_size, true);
    b.layer_norm(block + ".norm2", v.hidden_size);
    b.linear(block + ".mlp.linear_fc1", v.hidden_size, v.intermediate_size, true);
    b.linear(block + ".mlp.linear_fc2", v.intermediate_size, v.hidden_size, true);
  }
  add_patch_merger(v, root + ".merger", false, b);
  for (size_t k = 0; k < v.deepstack_visual_indexes.size(); ++k)
    add_patch_merger(v, root + ".deepstack_merger_list." + std::to_string(k), true, b);
}

bool is_float_dtype(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

}  // namespace

TextLayerTensors text_layer_tensors(const TextConfig& t, int64_t layer) {
  const std::string p = kTextRoot + ".layers." + std::to_string(layer) + ".";
  const int64_t q_width = t.num_attention_heads * t.head_dim;
  const int64_t kv_width = t.num_key_value_heads * t.head_dim;
  // A torch nn.Linear stores its weight as [out, in].
  auto bias = [&](const std::string& name, int64_t out) {
    return t.attention_bias ? ExpectedTensor{p + name, {out}} : ExpectedTensor{};
  };
  TextLayerTensors l;
  l.input_norm = {p + "input_layernorm.weight", {t.hidden_size}};
  l.q_proj = {p + "self_attn.q_proj.weight", {q_width, t.hidden_size}};
  l.q_bias = bias("self_attn.q_proj.bias", q_width);
  l.k_proj = {p + "self_attn.k_proj.weight", {kv_width, t.hidden_size}};
  l.k_bias = bias("self_attn.k_proj.bias", kv_width);
  l.v_proj = {p + "self_attn.v_proj.weight", {kv_width, t.hidden_size}};
  l.v_bias = bias("self_attn.v_proj.bias", kv_width);
  l.o_proj = {p + "self_attn.o_proj.weight", {t.hidden_size, q_width}};
  l.o_bias = bias("self_attn.o_proj.bias", t.hidden_size);
  // Qwen3 normalises queries and keys per head, so these norms span head_dim.
  l.q_norm = {p + "self_attn.q_norm.weight", {t.head_dim}};
  l.k_norm = {p + "self_attn.k_norm.weight", {t.head_dim}};
  l.post_attention_norm = {p + "post_attention_layernorm.weight", {t.hidden_size}};
  l.gate_proj = {p + "mlp.gate_proj.weight", {t.intermediate_size, t.hidden_size}};
  l.up_proj = {p + "mlp.up_proj.weight", {t.intermediate_size, t.hidden_size}};
  l.down_proj = {p + "mlp.down_proj.weight", {t.hidden_size, t.intermediate_size}};
  return l;
}

TextGlobalTensors text_global_tensors(const TextConfig& t) {
  TextGlobalTensors g;
  g.embed_tokens = {kTextRoot + ".embed_tokens.weight", {t.vocab_size, t.hidden_size}};
  g.final_norm = {kTextRoot + ".norm.weight", {t.hidden_size}};
  if (!t.tie_word_embeddings) g.lm_head = {"lm_head.weight", {t.vocab_size, t.hidden_size}};
  return g;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg) {
  LayoutBuilder b;
  add_text_model(cfg.text, b);
  add_vision_model(cfg.vision, b);
  const ExpectedTensor lm_head = text_global_tensors(cfg.text).lm_head;
  if (!lm_head.name.empty()) b.add(lm_head.name, lm_head.shape);
  return b.take();
}

namespace {

// How many numbered blocks under `prefix` ("model.visual.blocks.") the
// checkpoint holds: one more than the largest index seen.
int64_t blocks_present(const std::vector<std::string>& names, const std::string& prefix) {
  int64_t count = 0;
  for (const std::string& name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    int64_t index = 0;
    size_t i = prefix.size();
    for (; i < name.size() && i < prefix.size() + 9 && name[i] >= '0' && name[i] <= '9'; ++i)
      index = index * 10 + (name[i] - '0');
    if (i > prefix.size() && i < name.size() && name[i] == '.') count = std::max(count, index + 1);
  }
  return count;
}

const char* torch_dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F32: return "float32";
    default: return "";
  }
}

// Sizes in config.json that would make the expected-tensor list itself huge
// (a billion layers) are compared with what the checkpoint holds first, with
// arithmetic only, so a bad config fails at once instead of allocating.
void check_counts(const std::vector<std::string>& names, const ModelConfig& cfg) {
  const int64_t text_layers = blocks_present(names, "model.language_model.layers.");
  if (cfg.text.num_hidden_layers > text_layers)
    throw Error("config.json says num_hidden_layers " + std::to_string(cfg.text.num_hidden_layers) +
                " but the checkpoint holds " + std::to_string(text_layers) + " text layers");
  const int64_t vision_blocks = blocks_present(names, "model.visual.blocks.");
  if (cfg.vision.depth > vision_blocks)
    throw Error("config.json says vision_config.depth " + std::to_string(cfg.vision.depth) +
                " but the checkpoint holds " + std::to_string(vision_blocks) + " vision blocks");
  const int64_t mergers = blocks_present(names, "model.visual.deepstack_merger_list.");
  if (int64_t(cfg.vision.deepstack_visual_indexes.size()) > mergers)
    throw Error("config.json lists " + std::to_string(cfg.vision.deepstack_visual_indexes.size()) +
                " deepstack_visual_indexes but the checkpoint holds " + std::to_string(mergers) +
                " deepstack mergers");
}

// One 16-bit float type throughout, and the one config.json names: BF16 bytes
// read as F16 (or the reverse) give garbage, not an error, so a label that
// disagrees is refused. float32 tensors are always fine (an upcast export).
void check_dtypes(const Checkpoint& ckpt, const std::vector<std::string>& names, const ModelConfig& cfg) {
  const TensorView* first_half = nullptr;
  for (const std::string& name : names) {
    const TensorView* t = ckpt.find(name);
    if (!t || (t->dtype != DType::BF16 && t->dtype != DType::F16)) continue;
    if (!first_half) {
      first_half = t;
      if ((cfg.weights_dtype == "bfloat16" || cfg.weights_dtype == "float16") &&
          cfg.weights_dtype != torch_dtype_name(t->dtype))
        throw Error("checkpoint tensor '" + name + "' is labelled " + dtype_name(t->dtype) + " but config.json says " +
                    cfg.weights_dtype + ": the checkpoint is mislabelled or corrupt");
    } else if (t->dtype != first_half->dtype) {
      throw Error("checkpoint tensor '" + name + "' is labelled " + dtype_name(t->dtype) + " but '" + first_half->name +
                  "' is " + dtype_name(first_half->dtype) + ": the checkpoint is mislabelled or corrupt");
    }
  }
}

}  // namespace

void validate_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg) {
  const std::vector<std::string> names = ckpt.names();
  check_counts(names, cfg);
  const std::vector<ExpectedTensor> expected = expected_tensors(cfg);
  std::set<std::string> expected_names;
  for (const ExpectedTensor& e : expected) {
    expected_names.insert(e.name);
    const TensorView* t = ckpt.find(e.name);
    if (!t)
      throw Error("checkpoint has no tensor '" + e.name + "' (config implies shape " + shape_string(e.shape) +
                  ")");
    if (t->shape != e.shape)
      throw Error("checkpoint tensor '" + e.name + "' has shape " + shape_string(t->shape) + ", config implies " +
                  shape_string(e.shape));
    if (!is_float_dtype(t->dtype))
      throw Error("checkpoint tensor '" + e.name + "' has dtype " + dtype_name(t->dtype) +
                  ", expected BF16, F16 or F32");
  }
  check_dtypes(ckpt, names, cfg);
  // A surplus tensor means the config describes a smaller model than the
  // weights (fewer layers, no deepstack...): running it would silently be wrong.
  for (const std::string& name : names) {
    if (expected_names.count(name)) continue;
    if (name == "lm_head.weight" && cfg.text.tie_word_embeddings) continue;
    throw Error("checkpoint tensor '" + name + "' is not part of the model config.json describes (" +
                std::to_string(cfg.text.num_hidden_layers) + " text layers, " + std::to_string(cfg.vision.depth) +
                " vision blocks)");
  }
}

std::set<std::string> vision_int8_weight_names(const VisionConfig& cfg) {
  std::set<std::string> names;
  for (int64_t i = 0; i < cfg.depth; ++i)
    for (const char* linear : {"attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"})
      names.insert(fmt::format("blocks.{}.{}.weight", i, linear));
  // The patch mergers' first linear too (~5 % of the tower's multiply-adds,
  // ~0.1 of its ~3.7 CPU-s under int8 on the 2B), but not their second: its
  // outputs are the decoder's image embeddings with no later layer to average
  // the rounding out. On the tiny fixtures (docs/PERFORMANCE.md, "int8
  // vision") fc1 in int8 left the first-step logit error where it was and
  // moved the features' error 1.7-1.9 % -> 2.2-2.3 %; fc2 in int8 as well took
  // the features to 2.7-2.8 % and the logits' mean error up by 20-35 %.
  names.insert("merger.linear_fc1.weight");
  for (size_t k = 0; k < cfg.deepstack_visual_indexes.size(); ++k)
    names.insert(fmt::format("deepstack_merger_list.{}.linear_fc1.weight", k));
  return names;
}

}  // namespace qvl
