#include "qvl/vision/vision_int8.h"

#include <filesystem>
#include <system_error>

#include "qvl/decoder/int8_weights.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/checkpoint_layout.h"  // vision_int8_weight_names
#include "qvl/model/precision.h"

namespace qvl {

std::unique_ptr<kernels::Int8Cache> load_vision_int8_cache(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                           const std::string& dir, const NoteCallback& on_note) {
  std::vector<QuantSource> sources;
  for (const std::string& name : vision_int8_weight_names(cfg.vision))
    sources.push_back({name, &ckpt.get("model.visual." + name)});
  auto cache = load_int8_cache(ckpt, sources, dir, kDefaultInt8GroupSize, on_note, "vision", kVisionInt8FilePart);
  if (dir.empty()) return cache;  // in memory: no folder to tidy
  // The file of the set before the mergers joined, made from this checkpoint:
  // nothing reads it any more, and it is 311 MB on the 2B.
  const std::string previous = int8_cache_path(dir, ckpt.fingerprint(), kDefaultInt8GroupSize, "vision");
  std::error_code ignored;
  if (std::filesystem::remove(previous, ignored) && on_note) on_note("removed an older vision int8 cache: " + previous);
  return cache;
}

}  // namespace qvl
