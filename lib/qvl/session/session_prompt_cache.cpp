// The Session's side of the prompt cache (session/prompt_cache.h): where it
// lives, what its keys hold, and the first turn of a conversation split into
// the reusable prefix (loaded or prefilled and saved) and the rest.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <fmt/core.h>

#include "qvl/error.h"
#include "qvl/io/cache_dir.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/prompt_entry.h"
#include "qvl/io/sha256.h"
#include "qvl/kernels/cpu.h"
#include "qvl/kernels/quant4.h"
#include "qvl/session/session_internal.h"
#include "qvl/text/prompt_prefix.h"
#include "qvl/vision/module_builder.h"

namespace qvl {
namespace {

// The group size of the quantized weights (their format is part of the key).
int64_t quant_group_size(WeightQuant quant) {
  switch (quant) {
    case WeightQuant::None: return 0;
    case WeightQuant::Int8: return kDefaultInt8GroupSize;
    case WeightQuant::Int4: return kernels::kInt4GroupSize;
  }
  return -1;
}

// The program's own bytes: another build of qvl may compute the same keys and
// values with other roundings (a new kernel), and a warm answer must be the
// cold answer of the binary that gives it. A few milliseconds for ~3 MB.
std::string program_hash() {
  try {
    return sha256_file_hex("/proc/self/exe").substr(0, 16);
  } catch (const Error&) {
    return "unknown";
  }
}

}  // namespace

bool Session::Impl::open_prompt_cache() {
  if (prompt_cache || prompt_cache_unavailable) return prompt_cache != nullptr;
  std::string dir = options.prompt_cache_dir;
  if (dir.empty()) {
    try {
      dir = model_cache_dir(options.model_dir, checkpoint.fingerprint(), options.cache_dir) + "/prompts";
    } catch (const Error& e) {
      if (options.on_note) options.on_note(std::string("prompt cache off: ") + e.what());
      prompt_cache_unavailable = true;
      return false;
    }
  }
  prompt_cache = std::make_unique<PromptCache>(dir, options.prompt_cache_max_mb << 20, options.on_note);
  // Everything but the prompt that decides the keys and values: the weights
  // and config.json, how the decoder computes (dtype, quantization, kernel
  // tier, threads: the reductions' order may depend on them, the program
  // itself) and the vision encoder that makes the image features.
  const std::string config_hash = sha256_hex(read_text_file(options.model_dir + "/config.json")).substr(0, 16);
  prompt_cache_model_key = fmt::format(
      "qvl prompt cache v{}\nweights {} config {}\ndtype {} quant {} group {}\nkernels {} threads {} program {}\n"
      "vision {}\n",
      kPromptEntryVersion, checkpoint.fingerprint(), config_hash, name_of(options.dtype), name_of(options.quant),
      quant_group_size(options.quant), kernels::isa_name(kernels::active_isa()),
      at::get_num_threads(), program_hash(), vision_module_version());
  return true;
}

std::unique_ptr<Reply> Session::Impl::start_reply_with_prompt_cache(
    const std::vector<int32_t>& ids, const std::vector<PatchifiedImage>& images, Answer& answer,
    const SamplingOptions& sampling, Clock::time_point t_start, const TextCallback& on_text,
    std::optional<PromptPrefix>& to_store) {
  const size_t n_prefix = reusable_prefix_length(ids, int32_t(config.vision_end_token_id));
  // Opened at the first prompt with an image: text-only runs never touch the cache folder.
  if (n_prefix == 0 || !open_prompt_cache())
    return start_reply(0, conversation, ids, images, answer, sampling, t_start, on_text);

  PromptPrefix prefix;
  prefix.tokens.assign(ids.begin(), ids.begin() + std::ptrdiff_t(n_prefix));
  const std::vector<int32_t> rest(ids.begin() + std::ptrdiff_t(n_prefix), ids.end());
  // Every image of the prompt is inside the prefix (it ends at the last one).
  std::string key = prompt_cache_model_key;
  key += fmt::format("prefix {} tokens {}\n", n_prefix,
                     sha256_hex(prefix.tokens.data(), prefix.tokens.size() * sizeof(int32_t)));
  for (const PatchifiedImage& image : images)
    key += fmt::format("image {}x{}x{} {}\n", image.grid.t, image.grid.h, image.grid.w, FeatureCache::key_of(image));
  prefix.key = std::move(key);

  try {
    const auto t_load = Clock::now();
    const std::optional<int64_t> next = prompt_cache->load(prefix, decoder, 0);
    answer.timings.prompt_cache_s = seconds_since(t_load);
    if (next) {
      answer.reused_prompt_tokens = int64_t(n_prefix);
      stats.prompt_cache_hits += 1;
    } else {
      const auto t_vision = Clock::now();
      const std::optional<VisionFeatures> features = image_features(images);
      answer.timings.vision_s = seconds_since(t_vision);
      const auto t_prefill = Clock::now();
      const PromptInput in = prompt_input(prefix.tokens, answer.grids, features, 0);
      decoder.prefill(0, in.embeds, in.positions, in.deepstack_ptr());
      prefix.next_position = in.next_position;
      answer.timings.prefill_s = seconds_since(t_prefill);
    }
    conversation.next_position = next ? *next : prefix.next_position;
    conversation.context = prefix.tokens;
    const double prefix_prefill_s = answer.timings.prefill_s;
    std::unique_ptr<Reply> reply = start_reply(0, conversation, rest, {}, answer, sampling, t_start, on_text);
    answer.timings.prefill_s += prefix_prefill_s;
    if (!next) to_store = std::move(prefix);
    return reply;
  } catch (...) {
    decoder.reset_sequence(0);  // as if the turn had not started
    conversation = {};
    throw;
  }
}

bool Session::Impl::store_prompt_prefix(const PromptPrefix& prefix) {
  return prompt_cache->store(prefix, decoder, 0);
}

}  // namespace qvl
