// Which first tokens of a prompt the prompt cache (session/prompt_cache.h)
// keeps: everything up to and including the last image's <|vision_end|>.
// That is the costly part (the vision encoder and the prefill of the image
// tokens), and what questions about the same images share: the system
// message, the images and any text before them. The question and the
// assistant header after it are prefilled on every run. Special tokens are
// never merged with their neighbours by the tokenizer, so these tokens are the
// same whatever text follows the last image.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qvl {

// The length of that prefix; 0 when the prompt has no image, or when the
// prefix would be the whole prompt (something must be left to prefill: its
// last token's logits start the answer).
size_t reusable_prefix_length(const std::vector<int32_t>& ids, int32_t vision_end_id);

}  // namespace qvl
