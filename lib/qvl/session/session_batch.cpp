// Session::ask_batch: independent one-turn requests answered together, each
// in its own KV cache, decoded in lockstep so every weight read serves all.
#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/session/session.h"
#include "qvl/session/session_internal.h"

namespace qvl {

void Session::ask_batch(int64_t batch, const std::function<std::optional<BatchRequest>()>& next_request,
                        const SamplingOptions& sampling, const std::function<void(BatchResult)>& on_result) {
  Impl& s = *impl_;
  at::NoGradGuard no_grad;
  if (batch < 1) throw Error("the batch size must be at least 1, got " + std::to_string(batch));
  s.budget.check_batch(batch);
  // Sequence 0 is the conversation of ask(); the batch uses 1..batch.
  s.decoder.set_sequences(batch + 1);

  struct Running {
    uint64_t tag = 0;
    int64_t sequence = 0;
    std::unique_ptr<Answer> answer;  // Reply keeps a reference: must not move
    std::unique_ptr<Reply> reply;
    std::vector<int32_t> context;
    int64_t next_position = 0;
    at::Tensor logits;
    Clock::time_point t_start, t_decode;
  };
  std::vector<Running> running;
  std::vector<int64_t> free_sequences;
  for (int64_t i = batch; i >= 1; --i) free_sequences.push_back(i);
  bool requests_left = true;

  auto finish = [&](Running& r) {
    r.reply->finish({});
    Answer& a = *r.answer;
    a.timings.decode_s = seconds_since(r.t_decode);
    if (a.timings.ttft_s == 0) a.timings.ttft_s = seconds_since(r.t_start);
    free_sequences.push_back(r.sequence);
    on_result({r.tag, std::move(a), ""});
  };

  // Prefills one request into a free sequence; a request that fails (bad
  // prompt, too long, no memory for its image) is answered with its error.
  auto start = [&](BatchRequest& req) {
    Running r;
    r.tag = req.tag;
    r.t_start = Clock::now();
    r.answer = std::make_unique<Answer>();
    Answer& a = *r.answer;
    try {
      check_image_count(req.turn, req.images);
      for (const auto& img : req.images) a.grids.push_back(img.grid);
      s.budget.check_images(a.grids);
      r.context = s.prompt_ids(req.turn, req.images, "", {});
      a.prompt_tokens = int64_t(r.context.size());
      if (a.prompt_tokens + 1 > s.options.max_context)
        throw ContextFull("the prompt needs " + std::to_string(a.prompt_tokens) + " tokens but the context limit is " +
                          std::to_string(s.options.max_context) + "; raise --max-context or lower --max-pixels");
      const auto t_vision = Clock::now();
      const std::optional<VisionFeatures> features = s.image_features(req.images);
      if (features) a.timings.vision_s = seconds_since(t_vision);
      const auto t_prefill = Clock::now();
      r.sequence = free_sequences.back();
      s.decoder.reset_sequence(r.sequence);
      const PromptInput in = s.prompt_input(r.context, a.grids, features, 0);
      r.logits = s.decoder.forward_sequence(r.sequence, in.embeds, in.positions, in.deepstack_ptr());
      r.next_position = in.next_position;
      a.timings.prefill_s = seconds_since(t_prefill);
    } catch (const std::exception& e) {  // libtorch's errors too: one request must not end the batch
      const std::string what = e.what();
      on_result({req.tag, Answer{}, what.substr(0, what.find('\n'))});
      return;
    }
    free_sequences.pop_back();
    r.reply = std::make_unique<Reply>(sampling, s.tokenizer, a);
    r.t_decode = Clock::now();
    running.push_back(std::move(r));
  };

  while (true) {
    while (requests_left && !free_sequences.empty()) {
      std::optional<BatchRequest> req = next_request();
      if (!req) {
        requests_left = false;
        break;
      }
      start(*req);
    }
    if (running.empty()) break;

    // One token for every running sequence; those that go on are stepped together.
    const auto t_step = Clock::now();
    std::vector<int64_t> sequences, positions;
    std::vector<int32_t> tokens;
    std::vector<Running> still;
    for (Running& r : running) {
      const std::optional<int32_t> token =
          r.reply->next(r.logits, r.context, s.options.max_context - s.decoder.cached(r.sequence), {});
      if (r.answer->timings.ttft_s == 0) r.answer->timings.ttft_s = seconds_since(r.t_start);
      if (!token) {
        finish(r);
        continue;
      }
      sequences.push_back(r.sequence);
      tokens.push_back(*token);
      positions.push_back(r.next_position);
      r.context.push_back(*token);
      r.next_position += 1;
      still.push_back(std::move(r));
    }
    running = std::move(still);
    if (!running.empty()) {
      at::Tensor logits = s.decoder.step(sequences, tokens, positions);
      for (size_t i = 0; i < running.size(); ++i) running[i].logits = logits[int64_t(i)];
      s.stats.decoded_tokens += int64_t(running.size());
    }
    s.stats.decode_s += seconds_since(t_step);
  }
}

}  // namespace qvl
