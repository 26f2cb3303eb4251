#include "qvl/generate/generation_loop.h"

#include <chrono>
#include <optional>

namespace qvl {

void generate_replies(DecodeModel& model, std::vector<std::unique_ptr<Reply>> running, const RefillReplies& refill,
                      const FinishedReply& on_finished, GenerationStats& stats) {
  using Clock = std::chrono::steady_clock;
  bool more = bool(refill);
  while (true) {
    if (more) more = refill(running);
    if (running.empty()) break;

    // One token for every running reply; those that go on are decoded together.
    const auto t_step = Clock::now();
    std::vector<int64_t> sequences, positions;
    std::vector<int32_t> tokens;
    std::vector<std::unique_ptr<Reply>> going_on;
    for (std::unique_ptr<Reply>& r : running) {
      const std::optional<int32_t> token = r->next(model.room(r->sequence()));
      if (!token) {
        r->finish();
        on_finished(std::move(r));
        continue;
      }
      sequences.push_back(r->sequence());
      tokens.push_back(*token);
      positions.push_back(r->next_position());
      going_on.push_back(std::move(r));
    }
    running = std::move(going_on);
    if (!running.empty()) {
      const float* logits = model.decode(sequences, tokens, positions);
      const int64_t vocab = model.vocab();
      for (size_t i = 0; i < running.size(); ++i) running[i]->fed(tokens[i], logits + int64_t(i) * vocab, vocab);
      stats.decoded_tokens += int64_t(running.size());
    }
    stats.decode_s += std::chrono::duration<double>(Clock::now() - t_step).count();
  }
}

}  // namespace qvl
