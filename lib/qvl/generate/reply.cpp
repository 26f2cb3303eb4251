#include "qvl/generate/reply.h"


namespace qvl {
namespace {
double seconds_since(Reply::Clock::time_point t0) {
  return std::chrono::duration<double>(Reply::Clock::now() - t0).count();
}
}  // namespace

Reply::Reply(const SamplingOptions& sampling, const Tokenizer& tokenizer, int64_t sequence, SequenceState& state,
             std::vector<float> logits, Clock::time_point t_start, TextCallback on_text, bool keep_first_logits)
    : sampling_(sampling),
      sampler_(sampling),
      stream_(tokenizer, /*skip_special=*/true),
      sequence_(sequence),
      state_(state),
      logits_(std::move(logits)),
      on_text_(std::move(on_text)),
      t_start_(t_start),
      t_decode_(Clock::now()) {
  // Copied before the sampler scales them in place.
  if (keep_first_logits && sampling.max_new_tokens > 0) first_logits_ = logits_;
}

std::optional<int32_t> Reply::next(int64_t room) {
  if (int64_t(tokens_.size()) >= sampling_.max_new_tokens) return std::nullopt;
  if (cancelled_ && cancelled_()) {
    stop_reason_ = "interrupted";
    return std::nullopt;
  }
  const int32_t token = sampler_.next(logits_.data(), int64_t(logits_.size()), state_.context, tokens_);
  if (ttft_s_ == 0) ttft_s_ = seconds_since(t_start_);
  if (!sampling_.ignore_eos && sampler_.is_eos(token)) {
    stop_reason_ = "eos";
    return std::nullopt;
  }
  tokens_.push_back(token);
  const std::string piece = stream_.push(token);
  text_ += piece;
  last_unfed_ = token;
  if (on_text_ && !piece.empty() && !on_text_(piece)) {
    stop_reason_ = "interrupted";
    return std::nullopt;
  }
  if (room <= 1) {  // feeding this token would leave no room for the next
    stop_reason_ = "context";
    return std::nullopt;
  }
  if (int64_t(tokens_.size()) >= sampling_.max_new_tokens) return std::nullopt;
  last_unfed_.reset();
  return token;
}

void Reply::fed(int32_t token, const float* logits, int64_t vocab) {
  state_.context.push_back(token);
  state_.next_position += 1;
  logits_.assign(logits, logits + vocab);
}

void Reply::finish() {
  const std::string tail = stream_.finish();
  if (!tail.empty()) {
    text_ += tail;
    if (on_text_) on_text_(tail);
  }
  decode_s_ = seconds_since(t_decode_);
  if (ttft_s_ == 0) ttft_s_ = seconds_since(t_start_);
}

}  // namespace qvl
