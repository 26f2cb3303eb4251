// int8 weights for the vision tower (`--quant int8` and `--quant int4`): the
// four linears of each of the 24 blocks and the first linear of each patch
// merger (their second, which makes the image embeddings, stays bf16), quantized once per
// checkpoint (groups of 128, as the decoder's int8 weights) into their own
// cache file, <cache>/vision-mergers-int8-<fingerprint>-v<format>-g<group>.bin, that
// later runs mmap (decoder/int8_weights.h does the building and checking).
// The blocks then run kernels/int8_gemm.h's int8 × int8 GEMM, and the bf16
// copies of those weights are never loaded (docs/PERFORMANCE.md, "int8 vision").
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "qvl/decoder/options.h"  // NoteCallback
#include "qvl/kernels/int8_cache.h"
#include "qvl/model/config.h"

namespace qvl {

class Checkpoint;

// The cache file's part name (int8_weights.h): "vision-mergers", since the
// mergers' fc1 joined the set, so that binaries from before keep their
// "vision" file in a shared cache folder instead of rebuilding it in turn.
inline constexpr const char* kVisionInt8FilePart = "vision-mergers";

// The mapped cache of those weights, built first (atomically; a note through
// on_note) when missing, damaged or made from other weights; held in memory
// when dir is "" or the file cannot be written. Throws qvl::Error.
std::unique_ptr<kernels::Int8Cache> load_vision_int8_cache(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                           const std::string& dir, const NoteCallback& on_note);

}  // namespace qvl
