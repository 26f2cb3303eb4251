// The one generation loop. Every reply -- a chat turn, a single question, a
// batch of OCR pages -- is generated here: each step samples the next token of
// every running reply, hands over those that are over, and feeds the others
// to the model in one decode call, so each weight read serves all of them. A
// single question is a batch of one.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "qvl/generate/reply.h"

namespace qvl {

// What the loop needs from the model: one decode step over several sequences.
class DecodeModel {
 public:
  virtual ~DecodeModel() = default;
  // Feeds tokens[i] to sequences[i] at text position positions[i] (distinct
  // sequences). Returns float32 logits, one row of vocab() per sequence, valid
  // until the next call.
  virtual const float* decode(const std::vector<int64_t>& sequences, const std::vector<int32_t>& tokens,
                              const std::vector<int64_t>& positions) = 0;
  virtual int64_t vocab() const = 0;
  // Tokens the sequence's cache can still take.
  virtual int64_t room(int64_t sequence) const = 0;
};

struct GenerationStats {
  int64_t decoded_tokens = 0;  // tokens fed back to the model
  double decode_s = 0;         // wall time of the steps, sampling included
};

// Prefilled replies to add before a step (a batch with free sequences):
// appends them to `running`; returns false once no more will ever come.
using RefillReplies = std::function<bool(std::vector<std::unique_ptr<Reply>>& running)>;
// Gets each reply when it is over (finish() done), in order of completion.
using FinishedReply = std::function<void(std::unique_ptr<Reply>)>;

// Runs until every reply is over and `refill` (may be empty) has no more.
// An exception from the model ends the loop; no sequence has taken the
// tokens of the failed step.
void generate_replies(DecodeModel& model, std::vector<std::unique_ptr<Reply>> running, const RefillReplies& refill,
                      const FinishedReply& on_finished, GenerationStats& stats);

}  // namespace qvl
