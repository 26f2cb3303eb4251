// A prompt cache that outlives the process. After a new conversation's
// prompt is prefilled, the decoder's keys and values of its reusable prefix
// (text/prompt_prefix.h: up to the last image) go to a file; a later run whose
// prompt starts with the same prefix tokens, for the same images and the same
// model, dtype, quantization and kernels, loads them instead of running the
// vision encoder and prefilling those tokens. The key (session_prompt_cache.cpp)
// is kept inside the entry and compared on load, the tokens too, and the
// entry's checksum is verified (io/prompt_entry.h); anything that does not
// match is a miss that is recomputed and rewritten. Failing to write never
// fails an answer: it is said once, through the note callback.
//
// No torch types here: the Session includes it from its internal header only.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qvl/io/prompt_cache_dir.h"

namespace qvl {

class Decoder;

// A prefix to save once the answer is done (its cache rows stay as they
// are while the conversation only grows).
struct PromptPrefix {
  std::string key;
  std::vector<int32_t> tokens;
  int64_t next_position = 0;  // the rotary position of the token after the prefix
};

class PromptCache {
 public:
  PromptCache(std::string dir, int64_t max_bytes, std::function<void(const std::string&)> on_note);

  const std::string& dir() const { return dir_.dir(); }

  // Loads the entry of prefix.key into `sequence` of the decoder (which must
  // be empty) when it exists, is whole and holds exactly prefix.tokens in this
  // decoder's layout. Returns the next rotary position, or nullopt: a miss
  // (a damaged or mismatched entry is also noted, and the sequence stays empty).
  std::optional<int64_t> load(const PromptPrefix& prefix, Decoder& decoder, int64_t sequence);

  // Saves the first prefix.tokens.size() cached tokens of `sequence`. Returns
  // false when the entry could not be written (noted the first time only).
  bool store(const PromptPrefix& prefix, const Decoder& decoder, int64_t sequence);

 private:
  void note(const std::string& text) const;
  PromptCacheDir dir_;
  std::function<void(const std::string&)> on_note_;
  bool write_failed_ = false;
};

}  // namespace qvl
