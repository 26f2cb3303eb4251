// The two steps every answer goes through, for ask() and ask_batch() alike:
// start_reply() prefills a prompt into a decoder sequence, generate() runs the
// generation loop (generate/generation_loop.h) over the decoder.
#include <ATen/ATen.h>

#include "qvl/session/session_internal.h"

namespace qvl {
namespace {

// The decoder as the generation loop sees it.
class DecoderSteps : public DecodeModel {
 public:
  DecoderSteps(Decoder& decoder, int64_t max_context) : decoder_(decoder), max_context_(max_context) {}
  const float* decode(const std::vector<int64_t>& sequences, const std::vector<int32_t>& tokens,
                      const std::vector<int64_t>& positions) override {
    logits_ = decoder_.decode(sequences, tokens, positions).contiguous();
    return logits_.data_ptr<float>();
  }
  int64_t vocab() const override { return decoder_.config().vocab_size; }
  int64_t room(int64_t sequence) const override { return max_context_ - decoder_.cached(sequence); }

 private:
  Decoder& decoder_;
  int64_t max_context_;
  at::Tensor logits_;  // [B, vocab] float32 of the last step
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

void Session::Impl::generate(std::vector<std::unique_ptr<Reply>> running, const RefillReplies& refill,
                             const FinishedReply& on_finished) {
  DecoderSteps steps(decoder, options.max_context);
  generate_replies(steps, std::move(running), refill, on_finished, generation_stats);
}

}  // namespace qvl
