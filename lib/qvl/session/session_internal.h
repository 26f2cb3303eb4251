// Internal to lib/qvl/session: the state behind a Session and the pieces its
// one-conversation ask() (session.cpp) and ask_batch() (session_batch.cpp) share.
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qvl/decoder/decoder.h"
#include "qvl/generate/sampler.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/memory_budget.h"
#include "qvl/session/feature_cache.h"
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

// One reply being generated: samples each token from the logits, streams its
// text and decides when the reply is over.
class Reply {
 public:
  Reply(const SamplingOptions& sampling, const Tokenizer& tokenizer, Answer& answer)
      : sampling_(sampling), sampler_(sampling), stream_(tokenizer, /*skip_special=*/true), answer_(answer) {
    answer_.stop_reason = "length";
  }

  // Picks the next token. Returns it when it must be fed back to the decoder
  // to go on; nullopt when the reply is over (answer.stop_reason says why,
  // last_unfed() the sampled token that was not fed, if any).
  // context: every token the sequence holds; room: tokens the cache can still take.
  std::optional<int32_t> next(const at::Tensor& logits, const std::vector<int32_t>& context, int64_t room,
                              const TextCallback& on_text) {
    at::Tensor l = logits.to(at::kFloat).contiguous();
    const int32_t token = sampler_.next(l.data_ptr<float>(), l.numel(), context, answer_.tokens);
    if (!sampling_.ignore_eos && sampler_.is_eos(token)) {
      answer_.stop_reason = "eos";
      return std::nullopt;
    }
    answer_.tokens.push_back(token);
    const std::string piece = stream_.push(token);
    answer_.text += piece;
    last_unfed_ = token;
    if (on_text && !piece.empty() && !on_text(piece)) {
      answer_.stop_reason = "interrupted";
      return std::nullopt;
    }
    if (room <= 1) {  // feeding this token would leave no room for the next
      answer_.stop_reason = "context";
      return std::nullopt;
    }
    if (int64_t(answer_.tokens.size()) >= sampling_.max_new_tokens) return std::nullopt;
    last_unfed_.reset();
    return token;
  }

  // Flushes the text held back for an incomplete UTF-8 sequence.
  void finish(const TextCallback& on_text) {
    const std::string tail = stream_.finish();
    if (tail.empty()) return;
    answer_.text += tail;
    if (on_text) on_text(tail);
  }
  std::optional<int32_t> last_unfed() const { return last_unfed_; }

 private:
  const SamplingOptions& sampling_;
  Sampler sampler_;
  StreamDecoder stream_;
  Answer& answer_;
  std::optional<int32_t> last_unfed_;
};

// Throws unless there is one preprocessed image per image part of the turn.
void check_image_count(const std::vector<Message>& turn, const std::vector<PatchifiedImage>& images);

struct Session::Impl {
  SessionOptions options;
  ModelConfig config;
  PreprocessorConfig preprocessor;
  GenerationConfig generation;
  Tokenizer tokenizer;
  Checkpoint checkpoint;
  MemoryBudget budget;  // refuses before the decoder maps or converts any weight
  at::ScalarType dtype;
  Decoder decoder;
  std::unique_ptr<VisionEncoder> vision;  // built at the first image
  double load_s = 0;

  // Conversation state.
  std::vector<int32_t> context;     // every token in the KV cache, for penalties
  std::vector<int32_t> pending;     // generated but not yet fed (the last token)
  bool assistant_turn_open = false; // the last answer still needs its <|im_end|>
  int64_t next_position = 0;
  SessionStats stats;
  FeatureCache feature_cache;  // vision features of recent images
  std::map<std::string, std::shared_ptr<const std::vector<uint8_t>>> provided_images;  // by image part name

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
};

}  // namespace qvl
