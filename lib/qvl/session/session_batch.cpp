// Session::ask_batch: independent one-turn requests answered together, each
// in its own KV cache, decoded in lockstep so every weight read serves all.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // NoGradGuard: ATen.h stopped bringing it in libtorch 2.x

#include <deque>
#include <memory>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/session/session.h"
#include "qvl/session/session_internal.h"

namespace qvl {

void Session::ask_batch(int64_t batch, const std::function<std::optional<BatchRequest>()>& next_request,
                        const SamplingOptions& sampling, const std::function<void(BatchResult)>& on_result) {
  run_batch(batch, [&](bool, bool& done) {
    std::optional<BatchRequest> req = next_request();
    if (!req) done = true;
    else if (!req->sampling) req->sampling = sampling;
    return req;
  }, on_result, 0);
}

void Session::serve_batch(int64_t batch, const RequestSource& source, const std::function<void(BatchResult)>& on_result,
                          int64_t prefill_chunk) {
  run_batch(batch, [&](bool idle, bool& done) -> std::optional<BatchRequest> {
    if (idle && !source.wait()) {
      done = true;
      return std::nullopt;
    }
    return source.poll();
  }, on_result, prefill_chunk);
}

void Session::run_batch(int64_t batch, const std::function<std::optional<BatchRequest>(bool, bool&)>& next_request,
                        const std::function<void(BatchResult)>& on_result, int64_t prefill_chunk) {
  Impl& s = *impl_;
  at::NoGradGuard no_grad;
  if (batch < 1) throw Error("the batch size must be at least 1, got " + std::to_string(batch));
  s.budget.check_batch(batch);
  // Sequence 0 is the conversation of ask(); the batch uses 1..batch.
  s.decoder.set_sequences(batch + 1);

  // Per sequence: its tokens and position, and the answer of the request it holds.
  std::vector<SequenceState> states(size_t(batch + 1));
  std::vector<Answer> answers(size_t(batch + 1));
  std::vector<uint64_t> tags(size_t(batch + 1));
  std::vector<int64_t> free_sequences;
  for (int64_t i = batch; i >= 1; --i) free_sequences.push_back(i);

  // Requests whose prompts are prefilled in parts (prefill_chunk), first
  // come first: one part before each decode step.
  struct PartlyPrefilled {
    int64_t sequence;
    ChunkedPrompt prompt;
    BatchRequest request;  // its sampling, text callback and cancel flag
    Clock::time_point t_start;
  };
  std::deque<PartlyPrefilled> prefilling;

  // Prefills one request into a free sequence (or begins to); a request that
  // fails (bad prompt, too long, no memory for its image) is answered with its error.
  auto start = [&](BatchRequest& req) -> std::unique_ptr<Reply> {
    const auto t_start = Clock::now();
    const int64_t sequence = free_sequences.back();
    Answer& a = answers[size_t(sequence)];
    a = Answer{};
    states[size_t(sequence)] = SequenceState{};
    try {
      check_image_count(req.turn, req.images);
      for (const auto& img : req.images) a.grids.push_back(img.grid);
      s.budget.check_images(a.grids);
      const std::vector<int32_t> ids = s.prompt_ids(req.turn, req.images, "", {});
      a.prompt_tokens = int64_t(ids.size());
      if (a.prompt_tokens + 1 > s.options.max_context)
        throw ContextFull("the prompt needs " + std::to_string(a.prompt_tokens) + " tokens but the context limit is " +
                          std::to_string(s.options.max_context) + "; raise --max-context or lower --max-pixels");
      s.decoder.reset_sequence(sequence);
      if (!req.sampling) throw Error("a served request needs its own sampling options");
      if (prefill_chunk > 0 && a.prompt_tokens > prefill_chunk) {
        ChunkedPrompt prompt = s.begin_prompt(states[size_t(sequence)], ids, req.images, a);
        req.images.clear();  // encoded: the pixels are not needed any more
        free_sequences.pop_back();
        tags[size_t(sequence)] = req.tag;
        prefilling.push_back({sequence, std::move(prompt), std::move(req), t_start});
        return nullptr;
      }
      std::unique_ptr<Reply> reply =
          s.start_reply(sequence, states[size_t(sequence)], ids, req.images, a, *req.sampling, t_start, req.on_text);
      if (req.cancelled) reply->set_cancel(req.cancelled);
      free_sequences.pop_back();
      tags[size_t(sequence)] = req.tag;
      return reply;
    } catch (const std::exception& e) {  // libtorch's errors too: one request must not end the batch
      const std::string what = e.what();
      on_result({req.tag, Answer{}, what.substr(0, what.find('\n'))});
      return nullptr;
    }
  };

  // The next part of the first partly prefilled prompt; its reply joins the
  // running ones once the prompt is complete. A request cancelled meanwhile
  // ends there, "interrupted".
  auto prefill_part = [&](std::vector<std::unique_ptr<Reply>>& running) {
    PartlyPrefilled& p = prefilling.front();
    Answer& a = answers[size_t(p.sequence)];
    try {
      if (p.request.cancelled && p.request.cancelled()) {
        a.stop_reason = "interrupted";
        free_sequences.push_back(p.sequence);
        on_result({p.request.tag, std::move(a), ""});
      } else if (std::optional<std::vector<float>> logits = s.prefill_part(p.sequence, p.prompt, prefill_chunk, a)) {
        auto reply = std::make_unique<Reply>(*p.request.sampling, s.tokenizer(), p.sequence, states[size_t(p.sequence)],
                                             std::move(*logits), p.t_start, p.request.on_text,
                                             s.options.keep_first_logits);
        if (p.request.cancelled) reply->set_cancel(p.request.cancelled);
        running.push_back(std::move(reply));
      } else {
        return;  // more parts to come
      }
    } catch (const std::exception& e) {
      const std::string what = e.what();
      free_sequences.push_back(p.sequence);
      on_result({p.request.tag, Answer{}, what.substr(0, what.find('\n'))});
    }
    prefilling.pop_front();
  };
  // With nothing running, the parts follow each other until a reply runs.
  auto prefill_while_idle = [&](std::vector<std::unique_ptr<Reply>>& running) {
    while (running.empty() && !prefilling.empty()) prefill_part(running);
  };

  bool source_done = false;
  auto refill = [&](std::vector<std::unique_ptr<Reply>>& running) {
    if (!prefilling.empty()) prefill_part(running);
    prefill_while_idle(running);
    while (!source_done && !free_sequences.empty()) {
      bool done = false;
      std::optional<BatchRequest> req = next_request(running.empty() && prefilling.empty(), done);
      if (done) source_done = true;
      if (!req) break;
      if (std::unique_ptr<Reply> reply = start(*req)) running.push_back(std::move(reply));
      prefill_while_idle(running);
    }
    return !(source_done && prefilling.empty());
  };

  s.generate({}, refill, [&](std::unique_ptr<Reply> done) {
    const int64_t sequence = done->sequence();
    Answer& a = answers[size_t(sequence)];
    take_reply(*done, a);
    free_sequences.push_back(sequence);
    on_result({tags[size_t(sequence)], std::move(a), ""});
  });
}

}  // namespace qvl
