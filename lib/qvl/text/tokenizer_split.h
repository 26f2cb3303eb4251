// The pre-tokenizer of Qwen2/Qwen3: cuts normalized text into the words that
// BPE then encodes one by one. It reproduces the reference's split regex
// (kQwenSplitPattern, matched leftmost-first and kept "Isolated") with a
// scanner over code points: std::regex knows neither \p{L} nor \p{N}.
#pragma once
#include <string_view>
#include <vector>

namespace qvl {

extern const char* const kQwenSplitPattern;

// Appends the words of `text` (valid UTF-8) to `words`; they are views into
// `text` and together cover all of it, in order.
void split_words(std::string_view text, std::vector<std::string_view>& words);

}  // namespace qvl
