#include "qvl/vision/vision_int8.h"

#include <fmt/core.h>

#include "qvl/decoder/int8_weights.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/precision.h"

namespace qvl {

std::set<std::string> vision_int8_weight_names(const VisionConfig& cfg) {
  std::set<std::string> names;
  for (int64_t i = 0; i < cfg.depth; ++i)
    for (const char* linear : {"attn.qkv", "attn.proj", "mlp.linear_fc1", "mlp.linear_fc2"})
      names.insert(fmt::format("blocks.{}.{}.weight", i, linear));
  // The mergers stay bf16: ~7 % of the tower's multiply-adds (2-3 % of its
  // time to gain), but their outputs are the decoder's image embeddings, with
  // no later layer to absorb rounding; in int8 they took the first-step
  // logit error on the tiny fixtures from 0.055-0.071 to 0.066-0.101 (docs/PERFORMANCE.md).
  return names;
}

std::unique_ptr<kernels::Int8Cache> load_vision_int8_cache(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                           const std::string& dir, const NoteCallback& on_note) {
  std::vector<QuantSource> sources;
  for (const std::string& name : vision_int8_weight_names(cfg.vision))
    sources.push_back({name, &ckpt.get("model.visual." + name)});
  return load_int8_cache(ckpt, sources, dir, kDefaultInt8GroupSize, on_note, "vision");
}

}  // namespace qvl
