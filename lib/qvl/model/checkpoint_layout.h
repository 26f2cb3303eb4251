// The tensors a Qwen3-VL checkpoint must hold for a given config, named as the
// Hugging Face checkpoints name them, and the check that a checkpoint on disk
// matches its config before any weight is used.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"

namespace qvl {

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// The text decoder's tensors, named and shaped as the checkpoint holds them:
// the one place that spells them, for expected_tensors() and for the
// decoder's weight loading. A bias without attention_bias has an empty name.
struct TextLayerTensors {
  ExpectedTensor input_norm, q_proj, q_bias, k_proj, k_bias, v_proj, v_bias, o_proj, o_bias, q_norm, k_norm,
      post_attention_norm, gate_proj, up_proj, down_proj;
};
TextLayerTensors text_layer_tensors(const TextConfig& t, int64_t layer);
struct TextGlobalTensors {
  ExpectedTensor embed_tokens, final_norm;
  ExpectedTensor lm_head;  // empty name when tied to the embeddings
};
TextGlobalTensors text_global_tensors(const TextConfig& t);

// Every tensor of the checkpoint: model.language_model.*, model.visual.*, and
// lm_head.weight when the output projection is not tied to the embeddings.
// Order: text embeddings, text layers, final norm, vision, then lm_head.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg);

// Throws qvl::Error naming the first tensor that is missing, has another shape
// or a non-float dtype (BF16/F16/F32 are accepted), or is not part of the model.
// A tied model may still carry lm_head.weight; it is ignored then.
void validate_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg);

// The vision tower's weights that `--quant int8`/`int4` sessions run in int8
// (vision/vision_int8.h), as module parameter names ("blocks.3.attn.qkv.weight",
// "merger.linear_fc1.weight", ...; the checkpoint's names without
// "model.visual."): the one list the encoder and the memory budget share.
std::set<std::string> vision_int8_weight_names(const VisionConfig& cfg);

// "[96,32]": how shapes are spelled in error messages.
std::string shape_string(const std::vector<int64_t>& shape);
int64_t element_count(const std::vector<int64_t>& shape);

}  // namespace qvl
