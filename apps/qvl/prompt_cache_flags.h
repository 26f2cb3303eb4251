// --prompt-cache and --prompt-cache-max-mb (ask, chat): where the prompt cache
// (lib/qvl/session/prompt_cache.h) lives, or that it is off.
#pragma once
#include <cstdint>
#include <string>

#include "commands.h"
#include "qvl/session/session.h"

namespace qvl::app {

struct PromptCacheFlags {
  std::string where = "on";  // on (the model's cache folder) | off | a folder
  int64_t max_mb = 1024;
};

void add_prompt_cache_options(CLI::App* cmd, PromptCacheFlags& flags);
void apply_prompt_cache_flags(const PromptCacheFlags& flags, SessionOptions& options);

// For -v lines: " | prompt cache: reused N tokens {:.3f} s | vision runs K", or
// "stored N tokens" after a miss that was saved; "" when the cache played no part.
std::string prompt_cache_note(const Answer& a, const SessionStats& stats);

}  // namespace qvl::app
