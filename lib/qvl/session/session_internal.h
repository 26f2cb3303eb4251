// Internal to lib/qvl/session: the state behind a Session and the pieces its
// one-conversation ask() (session.cpp) and ask_batch() (session_batch.cpp)
// share: both prefill a prompt into a decoder sequence (start_reply) and hand
// the replies to the one generation loop (generate, session_generate.cpp).
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qvl/decoder/decoder.h"
#include "qvl/generate/generation_loop.h"
#include "qvl/generate/reply.h"
#include "qvl/generate/sampler.h"
#include "qvl/generate/thread_tuner.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/memory_budget.h"
#include "qvl/session/feature_cache.h"
#include "qvl/session/prompt_cache.h"
#include "qvl/session/session.h"
#include "qvl/text/tokenizer.h"
#include "qvl/vision/vision_encoder.h"

namespace qvl {

using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The prompt of a turn as the decoder takes it.
struct PromptInput {
  at::Tensor embeds;     // [L, hidden] with image features in the image-pad slots
  at::Tensor positions;  // [3, L]
  std::optional<DeepstackInput> deepstack;
  int64_t next_position = 0;
  const DeepstackInput* deepstack_ptr() const { return deepstack ? &*deepstack : nullptr; }
};

// A prompt prefilled a part at a time (Session::serve_batch's prefill_chunk):
// its whole input, made once, and how far the decoder has taken it.
struct ChunkedPrompt {
  PromptInput in;
  int64_t done = 0;         // tokens prefilled
  int64_t visual_done = 0;  // of those, image tokens
};

// Throws unless there is one preprocessed image per image part of the turn.
void check_image_count(const std::vector<Message>& turn, const std::vector<PatchifiedImage>& images);

// Moves a finished reply's text, tokens and timings into its answer.
void take_reply(Reply& reply, Answer& answer);

struct Session::Impl {
  SessionOptions options;
  ModelConfig config;
  PreprocessorConfig preprocessor;
  GenerationConfig generation;
  Checkpoint checkpoint;
  // The tokenizer loads on a thread (from the tokenizer cache, or by parsing
  // tokenizer.json's 11 MB of JSON) while the decoder is set up and the first
  // question is prepared; tokenizer() waits for it and rethrows its error.
  std::shared_future<Tokenizer> tokenizer_load;
  const Tokenizer& tokenizer() const { return tokenizer_load.get(); }
  MemoryBudget budget;  // refuses before the decoder maps or converts any weight
  at::ScalarType dtype;
  Decoder decoder;
  std::unique_ptr<VisionEncoder> vision;  // built at the first image
  double load_s = 0;

  // Conversation state.
  SequenceState conversation;       // decoder sequence 0: its tokens and next position
  std::vector<int32_t> pending;     // generated but not yet fed (the last token)
  bool assistant_turn_open = false; // the last answer still needs its <|im_end|>
  SessionStats stats;
  GenerationStats generation_stats;  // the decode steps of ask() and ask_batch()
  std::map<int, int64_t> decode_steps_by_threads;
  // Chooses the decode steps' thread count (options.adapt_threads); kept from
  // one answer to the next, made at the first with the configured count.
  std::optional<ThreadTuner> thread_tuner;
  bool adapts_threads() const;  // whether the decode steps have a tuner
  FeatureCache feature_cache;  // vision features of recent images
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> provided_images;  // by image part name
  std::unique_ptr<PromptCache> prompt_cache;  // opened at the first prompt with an image (options.prompt_cache)
  bool prompt_cache_unavailable = false;      // no cache folder could be had: said once
  std::string prompt_cache_model_key;         // the part of every key that the session fixes

  Impl(const SessionOptions& o, Clock::time_point t0);

  // The token ids of a turn's prompt, after `ids` and the text `prefix`, with
  // each image's pads expanded to its token count.
  std::vector<int32_t> prompt_ids(const std::vector<Message>& turn, const std::vector<PatchifiedImage>& images,
                                  const std::string& prefix, std::vector<int32_t> ids);
  // Vision features of every image of a turn, in order.
  std::optional<VisionFeatures> image_features(const std::vector<PatchifiedImage>& images);
  PromptInput prompt_input(const std::vector<int32_t>& ids, const std::vector<ImageGrid>& grids,
                           const std::optional<VisionFeatures>& features, int64_t first_position);

  VisionEncoder& vision_encoder();  // built at the first call

  DecodeRequest decode_request() const;
  ImageLimits image_limits() const;
  // An image part of a turn, decoded as decode_request() says.
  RgbImage decode_image_part(const std::string& path) const;
  // The preprocessor for a turn's images (sizes as (width, height)): the
  // session's, or one with a smaller max_pixels when they would not fit the
  // context otherwise (said through on_note). Throws ContextFull when even
  // the smallest size does not fit.
  PreprocessorConfig fit_to_context(const std::vector<Message>& turn,
                                    const std::vector<std::pair<int64_t, int64_t>>& sizes, int64_t max_new_tokens);
  // Tokens of a turn's prompt besides its image tokens.
  int64_t text_tokens(const std::vector<Message>& turn);
  // Encodes the images (answer.timings.vision_s), prefills `ids` into decoder
  // sequence `sequence` after `state` (answer.timings.prefill_s) and returns
  // the reply that goes on from there. Image grids come from `images`. Throws on
  // any failure, the sequence's cache unchanged.
  std::unique_ptr<Reply> start_reply(int64_t sequence, SequenceState& state, const std::vector<int32_t>& ids,
                                     const std::vector<PatchifiedImage>& images, Answer& answer,
                                     const SamplingOptions& sampling, Clock::time_point t_start,
                                     const TextCallback& on_text);
  // start_reply() in parts: begin_prompt() encodes the images and makes the
  // prompt's input (the sequence's state already counts the prompt), then each
  // prefill_part() prefills up to `tokens` more of it; the last part returns
  // the logits of the token after the prompt.
  ChunkedPrompt begin_prompt(SequenceState& state, const std::vector<int32_t>& ids,
                             const std::vector<PatchifiedImage>& images, Answer& answer);
  std::optional<std::vector<float>> prefill_part(int64_t sequence, ChunkedPrompt& prompt, int64_t tokens,
                                                 Answer& answer);
  // Opens the prompt cache (session_prompt_cache.cpp) if not yet open; false
  // when no folder can be had for it.
  bool open_prompt_cache();
  // start_reply() for the first turn of a conversation (sequence 0 empty)
  // with the prompt cache: a prompt whose reusable prefix is in the cache
  // loads it and prefills only the rest; otherwise the prefix is prefilled
  // on its own and *to_store says what to save once the answer is done
  // (store_prompt_prefix), then the rest. The same two prefills either way,
  // so a warm answer is the cold one, bit for bit.
  std::unique_ptr<Reply> start_reply_with_prompt_cache(const std::vector<int32_t>& ids,
                                                       const std::vector<PatchifiedImage>& images, Answer& answer,
                                                       const SamplingOptions& sampling, Clock::time_point t_start,
                                                       const TextCallback& on_text,
                                                       std::optional<PromptPrefix>& to_store);
  bool store_prompt_prefix(const PromptPrefix& prefix);
  // The generation loop over this session's decoder (generate/generation_loop.h).
  void generate(std::vector<std::unique_ptr<Reply>> running, const RefillReplies& refill,
                const FinishedReply& on_finished);
};

}  // namespace qvl
