// What one answer costs in arithmetic and in weight bytes, from the config's
// shapes alone: the numerators of qvl bench's efficiency figures (measured
// speed as a fraction of the machine's ceilings, kernels/machine_probe.h).
// Counts are of useful work: a multiply-add is 2 FLOPs, causal attention
// counts only the key positions a query sees, and nothing is charged for
// norms, activations or rotary embeddings (a few percent at most).
#pragma once
#include <cstdint>
#include <vector>

#include "qvl/model/config.h"
#include "qvl/model/precision.h"

namespace qvl {

// Elements of the matrices every decoded token multiplies by: each layer's
// q/k/v/o and gate/up/down projections and the output projection (vocab ×
// hidden, the embedding matrix itself when tied).
int64_t decoder_matrix_elements(const TextConfig& t);

// Bytes of decoder weights a decode step streams from memory: those matrices
// in `quant`'s format (int8: one byte per element, rows padded to the group,
// plus a float scale per group; int4: half a byte per element, rows padded to
// 128 columns, a float16 scale and offset per 64; none: `dtype`'s width) and
// the norm vectors.
// Throws qvl::Error for a group size that is not positive.
double decode_weight_bytes_per_token(const TextConfig& t, ComputeDtype dtype, WeightQuant quant,
                                     int64_t int8_group_size = kDefaultInt8GroupSize);

// FLOPs of prefilling `tokens` new tokens after `past` cached ones: the
// layers' projections for every token, causal attention (QKᵀ and PV over the
// positions each query sees), and the output projection for the last token
// only (the one whose logits are sampled).
double prefill_flops(const TextConfig& t, int64_t tokens, int64_t past = 0);

// FLOPs of encoding images of these patch counts (grid t·h·w each, before
// merging): the patch embedding, every block's projections and its full
// attention within the image, the final merger and the deepstack mergers on
// the merged tokens.
double vision_flops(const VisionConfig& v, const std::vector<int64_t>& patches_per_image);

}  // namespace qvl
