#include "qvl/vision/vision_int8.h"

#include <fmt/core.h>

#include <filesystem>
#include <system_error>

#include "qvl/decoder/int8_weights.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/precision.h"

namespace qvl {

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

std::unique_ptr<kernels::Int8Cache> load_vision_int8_cache(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                           const std::string& dir, const NoteCallback& on_note) {
  std::vector<QuantSource> sources;
  for (const std::string& name : vision_int8_weight_names(cfg.vision))
    sources.push_back({name, &ckpt.get("model.visual." + name)});
  auto cache = load_int8_cache(ckpt, sources, dir, kDefaultInt8GroupSize, on_note, "vision", kVisionInt8FilePart);
  // The file of the set before the mergers joined, made from this checkpoint:
  // nothing reads it any more, and it is 311 MB on the 2B.
  const std::string previous = int8_cache_path(dir, ckpt.fingerprint(), kDefaultInt8GroupSize, "vision");
  std::error_code ignored;
  if (std::filesystem::remove(previous, ignored) && on_note) on_note("removed an older vision int8 cache: " + previous);
  return cache;
}

}  // namespace qvl
