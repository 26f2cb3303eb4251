// The tensors a Qwen3-VL checkpoint must hold for a given config, named as the
// Hugging Face checkpoints name them, and the check that a checkpoint on disk
// matches its config before any weight is used.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"

namespace qvl {

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};

// Every tensor of the checkpoint: model.language_model.*, model.visual.*, and
// lm_head.weight when the output projection is not tied to the embeddings.
// Order: text embeddings, text layers, final norm, vision, then lm_head.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& cfg);

// Throws qvl::Error naming the first tensor that is missing, has another shape
// or a non-float dtype (BF16/F16/F32 are accepted), or is not part of the model.
// A tied model may still carry lm_head.weight; it is ignored then.
void validate_checkpoint(const Checkpoint& ckpt, const ModelConfig& cfg);

// "[96,32]": how shapes are spelled in error messages.
std::string shape_string(const std::vector<int64_t>& shape);
int64_t element_count(const std::vector<int64_t>& shape);

}  // namespace qvl
