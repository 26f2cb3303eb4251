#include "prompt_cache_flags.h"

#include <fmt/core.h>

namespace qvl::app {

void add_prompt_cache_options(CLI::App* cmd, PromptCacheFlags& f) {
  cmd->add_option("--prompt-cache", f.where,
                  "Keep the prompt's images and the text before them as keys and values on disk, so a later question "
                  "about the same images skips the vision encoder and their prefill: on (in the model's cache "
                  "folder, .../prompts), off, or a folder")
      ->capture_default_str();
  cmd->add_option("--prompt-cache-max-mb", f.max_mb,
                  "Size bound of the prompt cache; the least recently used entries are removed beyond it")
      ->check(integer_in(1, int64_t(1) << 30))
      ->capture_default_str();
}

void apply_prompt_cache_flags(const PromptCacheFlags& f, SessionOptions& o) {
  o.prompt_cache = f.where != "off";
  o.prompt_cache_dir = f.where == "on" || f.where == "off" ? "" : f.where;
  o.prompt_cache_max_mb = f.max_mb;
}

std::string prompt_cache_note(const Answer& a, const SessionStats& stats) {
  if (a.reused_prompt_tokens > 0)
    return fmt::format(" | prompt cache: reused {} tokens ({:.3f} s) | vision runs {}", a.reused_prompt_tokens,
                       a.timings.prompt_cache_s, stats.vision_calls);
  if (a.prompt_stored) return fmt::format(" | prompt cache: stored | vision runs {}", stats.vision_calls);
  return "";
}

}  // namespace qvl::app
