// One reply being generated in one decoder sequence: samples each token from
// the logits, streams its text and decides when the reply is over. The
// generation loop (generation_loop.h) drives any number of them in lockstep.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qvl/generate/sampler.h"
#include "qvl/text/tokenizer.h"

namespace qvl {

// Return false to stop generation (Ctrl-C, a consumer that has enough).
using TextCallback = std::function<bool(const std::string& piece)>;

// What a decoder sequence holds: every token in its KV cache (for the
// penalties) and the text position the next token takes. It outlives a reply:
// a conversation keeps it from turn to turn.
struct SequenceState {
  std::vector<int32_t> context;
  int64_t next_position = 0;
};

class Reply {
 public:
  using Clock = std::chrono::steady_clock;
  // sequence: the decoder sequence the reply is generated in, whose state is
  // `state`; logits: float32 scores of the token after the prompt (from the
  // prefill); t_start: when the request began, for the time to first token.
  Reply(const SamplingOptions& sampling, const Tokenizer& tokenizer, int64_t sequence, SequenceState& state,
        std::vector<float> logits, Clock::time_point t_start, TextCallback on_text = {},
        bool keep_first_logits = false);

  // Picks the next token from the current logits. Returns it when it must be
  // fed to the decoder to go on; nullopt when the reply is over (stop_reason()
  // says why, last_unfed() the sampled token that was not fed, if any).
  // room: tokens the sequence's cache can still take.
  std::optional<int32_t> next(int64_t room);
  // The decoder took `token`: the sequence grows and `logits` (vocab floats)
  // score the token after it.
  void fed(int32_t token, const float* logits, int64_t vocab);
  // Flushes the text held back for an incomplete UTF-8 sequence; the reply is over.
  void finish();
  // Asked before each token: true ends the reply there, as "interrupted" (a
  // server's client that went away, a time limit).
  void set_cancel(std::function<bool()> cancelled) { cancelled_ = std::move(cancelled); }

  int64_t sequence() const { return sequence_; }
  int64_t next_position() const { return state_.next_position; }
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::string& stop_reason() const { return stop_reason_; }  // eos | length | interrupted | context
  std::optional<int32_t> last_unfed() const { return last_unfed_; }
  const std::vector<float>& first_logits() const { return first_logits_; }  // with keep_first_logits only
  double ttft_s() const { return ttft_s_; }      // from t_start to the first sampled token
  double decode_s() const { return decode_s_; }  // from the prefill's end to finish()

  // Moves the results out (after finish()).
  std::string take_text() { return std::move(text_); }
  std::vector<int32_t> take_tokens() { return std::move(tokens_); }
  std::vector<float> take_first_logits() { return std::move(first_logits_); }

 private:
  const SamplingOptions sampling_;  // a copy: callers may pass a temporary
  Sampler sampler_;
  StreamDecoder stream_;
  int64_t sequence_;
  SequenceState& state_;
  std::vector<float> logits_;
  TextCallback on_text_;
  std::function<bool()> cancelled_;
  Clock::time_point t_start_, t_decode_;
  std::string text_;
  std::vector<int32_t> tokens_;
  std::string stop_reason_ = "length";
  std::optional<int32_t> last_unfed_;
  std::vector<float> first_logits_;
  double ttft_s_ = 0, decode_s_ = 0;
};

}  // namespace qvl
