#include "qvl/model/checkpoint_layout.h"

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

void add_text_model(const TextConfig& t, LayoutBuilder& b) {
  const std::string root = "model.language_model";
  const int64_t q_width = t.num_attention_heads * t.head_dim;
  const int64_t kv_width = t.num_key_value_heads * t.head_dim;
  b.add(root + ".embed_tokens.weight", {t.vocab_size, t.hidden_size});
  for (int64_t i = 0; i < t.num_hidden_layers; ++i) {
    const std::string layer = root + ".layers." + std::to_string(i);
    b.add(layer + ".input_layernorm.weight", {t.hidden_size});
    b.linear(layer + ".self_attn.q_proj", t.hidden_size, q_width, t.attention_bias);
    b.linear(layer + ".self_attn.k_proj", t.hidden_size, kv_width, t.attention_bias);
    b.linear(layer + ".self_attn.v_proj", t.hidden_size, kv_width, t.attention_bias);
    b.linear(layer + ".self_attn.o_proj", q_width, t.hidden_size, t.attention_bias);
    // Qwen3 normalises queries and keys per head, so these norms span head_dim.
    b.add(layer + ".self_attn.q_norm.weight", {t.head_dim});
    b.add(layer + ".self_attn.k_norm.weight", {t.head_dim});
    b.add(layer + ".post_attention_layernorm.weight", {t.hidden_size});
    b.linear(layer + ".mlp.gate_proj", t.hidden_size, t.intermediate_size, false);
    b.linear(layer + ".mlp.up_proj", t.hidden_size, t.intermediate_size, false);
    b.linear(layer + ".mlp.down_proj", t.intermediate_size, t.hidden_size, false);
  }
  b.add(root + ".norm.weight", {t.hidden_size});
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
  if (!cfg.text.tie_word_embeddings) b.add("lm_head.weight", {cfg.text.vocab_size, cfg.text.hidden_size});
  return b.take();
}

void validate_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg) {
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
  // A surplus tensor means the config describes a smaller model than the
  // weights (fewer layers, no deepstack...): running it would silently be wrong.
  for (const std::string& name : ckpt.names()) {
    if (expected_names.count(name)) continue;
    if (name == "lm_head.weight" && cfg.text.tie_word_embeddings) continue;
    throw Error("checkpoint tensor '" + name + "' is not part of the model config.json describes (" +
                std::to_string(cfg.text.num_hidden_layers) + " text layers, " + std::to_string(cfg.vision.depth) +
                " vision blocks)");
  }
}

}  // namespace qvl
