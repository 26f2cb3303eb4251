// The two steps every answer goes through, for ask() and ask_batch() alike:
// start_reply() prefills a prompt into a decoder sequence, generate() runs the
// generation loop (generate/generation_loop.h) over the decoder.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <ctime>
#include <map>

#include "qvl/session/session_internal.h"

namespace qvl {
namespace {

// Sets the OpenMP/ATen thread count for the steps to come (a no-op when it is that already).
void use_threads(int threads) {
  if (at::get_num_threads() != threads) at::set_num_threads(threads);
}

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// The decoder as the generation loop sees it. With a tuner, each step runs
// on the thread count it asks for: at::set_num_threads sets this thread's
// OpenMP count, which every region the step opens takes (the kernels' and
// ATen's, which have no num_threads clause), and ATen's own record of it;
// set between steps, it holds for a whole step. Prefills keep the configured
// count (compute-bound, they gain nothing from fewer threads beside other
// work, docs/PERFORMANCE.md): start_reply() sets it back for a request that
// joins a running batch, and the loop's end for the next question.
class DecoderSteps : public DecodeModel {
 public:
  DecoderSteps(Decoder& decoder, int64_t max_context, ThreadTuner* tuner, std::map<int, int64_t>& steps_by_threads)
      : decoder_(decoder), max_context_(max_context), tuner_(tuner), steps_by_threads_(steps_by_threads) {}
  ~DecoderSteps() override {
    if (tuner_) use_threads(tuner_->most());
  }
  DecoderSteps(const DecoderSteps&) = delete;
  DecoderSteps& operator=(const DecoderSteps&) = delete;

  const float* decode(const std::vector<int64_t>& sequences, const std::vector<int32_t>& tokens,
                      const std::vector<int64_t>& positions) override {
    if (tuner_) {
      // More or fewer sequences per step: step times change with them.
      if (int64_t(sequences.size()) != batch_) tuner_->forget_timings();
      batch_ = int64_t(sequences.size());
      threads_ = tuner_->next_threads();
      use_threads(threads_);
    }
    const auto t0 = Clock::now();
    const double cpu0 = tuner_ ? process_cpu_seconds() : 0;
    logits_ = decoder_.decode(sequences, tokens, positions).contiguous();
    if (tuner_) tuner_->record(threads_, seconds_since(t0), process_cpu_seconds() - cpu0);
    ++steps_by_threads_[threads_];
    return logits_.data_ptr<float>();
  }
  int64_t vocab() const override { return decoder_.config().vocab_size; }
  int64_t room(int64_t sequence) const override { return max_context_ - decoder_.cached(sequence); }

 private:
  Decoder& decoder_;
  int64_t max_context_;
  ThreadTuner* tuner_;  // null: every step on the configured count
  std::map<int, int64_t>& steps_by_threads_;
  int threads_ = at::get_num_threads();  // what the last step ran on
  int64_t batch_ = 0;   // sequences in the last step
  at::Tensor logits_;   // [B, vocab] float32 of the last step
};

std::vector<float> to_floats(const at::Tensor& logits) {
  at::Tensor l = logits.to(at::kFloat).contiguous();
  return std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
}

}  // namespace

void take_reply(Reply& reply, Answer& answer) {
  answer.text = reply.take_text();
  answer.tokens = reply.take_tokens();
  answer.stop_reason = reply.stop_reason();
  answer.first_logits = reply.take_first_logits();
  answer.timings.ttft_s = reply.ttft_s();
  answer.timings.decode_s = reply.decode_s();
}

std::unique_ptr<Reply> Session::Impl::start_reply(int64_t sequence, SequenceState& state,
                                                  const std::vector<int32_t>& ids,
                                                  const std::vector<PatchifiedImage>& images, Answer& answer,
                                                  const SamplingOptions& sampling, Clock::time_point t_start,
                                                  const TextCallback& on_text) {
  // A request joining a running batch prefills on the configured threads,
  // whatever the decode steps ran on.
  if (thread_tuner) use_threads(thread_tuner->most());
  const auto t_vision = Clock::now();
  const std::optional<VisionFeatures> features = image_features(images);
  if (features) answer.timings.vision_s = seconds_since(t_vision);

  const auto t_prefill = Clock::now();
  std::vector<ImageGrid> grids;  // of these images: a prompt's rest after a cached prefix has none
  for (const PatchifiedImage& image : images) grids.push_back(image.grid);
  const PromptInput in = prompt_input(ids, grids, features, state.next_position);
  const at::Tensor logits = decoder.prefill(sequence, in.embeds, in.positions, in.deepstack_ptr());
  state.next_position = in.next_position;
  state.context.insert(state.context.end(), ids.begin(), ids.end());
  answer.timings.prefill_s = seconds_since(t_prefill);
  return std::make_unique<Reply>(sampling, tokenizer(), sequence, state, to_floats(logits), t_start, on_text,
                                 options.keep_first_logits);
}

ChunkedPrompt Session::Impl::begin_prompt(SequenceState& state, const std::vector<int32_t>& ids,
                                         const std::vector<PatchifiedImage>& images, Answer& answer) {
  if (thread_tuner) use_threads(thread_tuner->most());
  const auto t_vision = Clock::now();
  const std::optional<VisionFeatures> features = image_features(images);
  if (features) answer.timings.vision_s = seconds_since(t_vision);
  std::vector<ImageGrid> grids;
  for (const PatchifiedImage& image : images) grids.push_back(image.grid);
  ChunkedPrompt prompt{prompt_input(ids, grids, features, state.next_position)};
  state.next_position = prompt.in.next_position;
  state.context.insert(state.context.end(), ids.begin(), ids.end());
  return prompt;
}

std::optional<std::vector<float>> Session::Impl::prefill_part(int64_t sequence, ChunkedPrompt& prompt, int64_t tokens,
                                                              Answer& answer) {
  if (thread_tuner) use_threads(thread_tuner->most());  // decode steps ran in between
  const auto t_prefill = Clock::now();
  const int64_t length = prompt.in.embeds.size(0);
  const int64_t n = std::min(tokens, length - prompt.done);
  std::optional<DeepstackInput> deepstack;
  int64_t visual = 0;
  if (prompt.in.deepstack) {
    // The image tokens of this part, and their rows of each deepstack layer's features.
    at::Tensor mask = prompt.in.deepstack->visual_mask.narrow(0, prompt.done, n);
    visual = mask.sum().item<int64_t>();
    if (visual > 0) {
      deepstack.emplace();
      deepstack->visual_mask = mask.contiguous();
      for (const at::Tensor& f : prompt.in.deepstack->features)
        deepstack->features.push_back(f.narrow(0, prompt.visual_done, visual).contiguous());
    }
  }
  const at::Tensor logits =
      decoder.prefill(sequence, prompt.in.embeds.narrow(0, prompt.done, n).contiguous(),
                      prompt.in.positions.narrow(1, prompt.done, n).contiguous(), deepstack ? &*deepstack : nullptr);
  prompt.done += n;
  prompt.visual_done += visual;
  answer.timings.prefill_s += seconds_since(t_prefill);
  if (prompt.done < length) return std::nullopt;
  return to_floats(logits);
}

bool Session::Impl::adapts_threads() const {
  // float32 runs keep their count: OpenBLAS's own threads do their matmuls.
  return options.adapt_threads && options.dtype == ComputeDtype::BF16 && at::get_num_threads() > 1;
}

void Session::Impl::generate(std::vector<std::unique_ptr<Reply>> running, const RefillReplies& refill,
                             const FinishedReply& on_finished) {
  ThreadTuner* tuner = nullptr;
  if (adapts_threads()) {
    const int configured = at::get_num_threads();
    if (!thread_tuner || thread_tuner->most() != configured) {
      ThreadTuner::Options o;
      o.most = configured;
      thread_tuner.emplace(o);
    }
    tuner = &*thread_tuner;
  }
  DecoderSteps steps(decoder, options.max_context, tuner, decode_steps_by_threads);
  generate_replies(steps, std::move(running), refill, on_finished, generation_stats);
}

}  // namespace qvl
