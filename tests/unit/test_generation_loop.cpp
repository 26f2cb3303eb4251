// The generation loop with a scripted model in place of the decoder: which
// tokens each reply gets, how a batch refills, why a reply stops.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "qvl/generate/generation_loop.h"
#include "qvl/text/tokenizer.h"
#include "test_support.h"

using namespace qvl;

namespace {

constexpr int64_t kVocab = 1000;
constexpr int32_t kEos = 7;

// The token a scripted sequence wants after `token` at `position`: ids 20..69
// (single ASCII characters in the Qwen vocabulary), or eos once the position reaches
// the sequence's script length.
int32_t scripted_next(int64_t sequence, int32_t token, int64_t position, int64_t length) {
  if (position >= length) return kEos;
  return int32_t(20 + (token * 7 + sequence * 3 + position) % 50);
}

std::vector<float> one_hot(int32_t token) {
  std::vector<float> l(kVocab, 0.0f);
  l[size_t(token)] = 1.0f;
  return l;
}

// Plays the decoder: logits favour scripted_next(); records every call.
class ScriptedModel : public DecodeModel {
 public:
  std::map<int64_t, int64_t> length;  // per sequence: the position where it says eos
  std::map<int64_t, int64_t> cached;  // per sequence: tokens in its "cache"
  int64_t max_context = 1000;
  std::vector<std::vector<int64_t>> calls;  // the sequences of each decode call
  int64_t fail_at_call = -1;

  const float* decode(const std::vector<int64_t>& sequences, const std::vector<int32_t>& tokens,
                      const std::vector<int64_t>& positions) override {
    if (int64_t(calls.size()) == fail_at_call) throw std::runtime_error("model failed");
    calls.push_back(sequences);
    rows_.assign(sequences.size() * size_t(kVocab), 0.0f);
    for (size_t i = 0; i < sequences.size(); ++i) {
      cached[sequences[i]] += 1;
      const int32_t next = scripted_next(sequences[i], tokens[i], positions[i] + 1, length[sequences[i]]);
      rows_[i * size_t(kVocab) + size_t(next)] = 1.0f;
    }
    return rows_.data();
  }
  int64_t vocab() const override { return kVocab; }
  int64_t room(int64_t sequence) const override {
    auto it = cached.find(sequence);
    return max_context - (it == cached.end() ? 0 : it->second);
  }

 private:
  std::vector<float> rows_;
};

// What a sequence with a prompt of `prompt` tokens should generate, worked out from the script alone.
std::vector<int32_t> expected_tokens(int64_t sequence, int64_t prompt, int64_t length, int64_t max_new) {
  std::vector<int32_t> out;
  int32_t token = scripted_next(sequence, 1, prompt, length);
  for (int64_t pos = prompt; token != kEos && int64_t(out.size()) < max_new; ++pos) {
    out.push_back(token);
    token = scripted_next(sequence, token, pos + 1, length);
  }
  return out;
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::load_from_model_dir(test::tiny_model_dir());
  return t;
}

SamplingOptions greedy(int64_t max_new) {
  SamplingOptions o;
  o.max_new_tokens = max_new;
  o.eos_token_ids = {kEos};
  return o;
}

// A reply in `sequence` whose prompt of `prompt` tokens was just prefilled.
std::unique_ptr<Reply> started(ScriptedModel& model, int64_t sequence, SequenceState& state, int64_t prompt,
                               const SamplingOptions& sampling, TextCallback on_text = {}) {
  state.context.assign(size_t(prompt), 1);
  state.next_position = prompt;
  model.cached[sequence] = prompt;
  return std::make_unique<Reply>(sampling, tokenizer(), sequence, state,
                                 one_hot(scripted_next(sequence, 1, prompt, model.length[sequence])),
                                 Reply::Clock::now(), std::move(on_text));
}

}  // namespace

TEST_CASE("generation loop: a batch that refills gives every reply the tokens it gets alone") {
  const SamplingOptions sampling = greedy(40);
  // Five requests, two sequences: request r runs in whichever sequence is free.
  const std::vector<int64_t> prompt = {5, 9, 3, 12, 6}, length = {14, 30, 8, 20, 60};
  ScriptedModel model;
  std::vector<SequenceState> states(3);
  std::vector<int64_t> free = {2, 1};
  std::map<int64_t, size_t> request_of;  // sequence -> request it holds
  size_t next = 0;
  std::map<size_t, std::vector<int32_t>> got;
  std::map<size_t, std::string> text, stop;
  std::map<size_t, int64_t> ran_in;
  GenerationStats stats;
  auto refill = [&](std::vector<std::unique_ptr<Reply>>& running) {
    while (!free.empty()) {
      if (next == prompt.size()) return false;
      const int64_t seq = free.back();
      free.pop_back();
      model.length[seq] = length[next];
      states[size_t(seq)] = {};
      request_of[seq] = next;
      ran_in[next] = seq;
      running.push_back(started(model, seq, states[size_t(seq)], prompt[next], sampling));
      ++next;
    }
    return true;
  };
  generate_replies(model, {}, refill, [&](std::unique_ptr<Reply> r) {
    const size_t req = request_of[r->sequence()];
    got[req] = r->tokens();
    text[req] = r->text();
    stop[req] = r->stop_reason();
    free.push_back(r->sequence());
  }, stats);

  REQUIRE(got.size() == prompt.size());
  int64_t fed = 0;
  for (size_t r = 0; r < prompt.size(); ++r) {
    CAPTURE(r);
    const auto want = expected_tokens(ran_in[r], prompt[r], length[r], 40);
    CHECK(got[r] == want);
    CHECK(text[r] == tokenizer().decode(std::vector<TokenId>(want.begin(), want.end()), true));
    CHECK(stop[r] == (length[r] - prompt[r] < 40 ? "eos" : "length"));
    fed += int64_t(want.size()) - (stop[r] == "length" ? 1 : 0);
  }
  CHECK(stats.decoded_tokens == fed);
  size_t widest = 0;
  for (const auto& c : model.calls) widest = std::max(widest, c.size());
  CHECK(widest == 2);  // the two sequences were decoded together

  // The same request alone, as a batch of one in sequence 0: the same tokens.
  ScriptedModel alone;
  alone.length[ran_in[1]] = length[1];
  SequenceState state;
  std::vector<int32_t> single;
  std::vector<std::unique_ptr<Reply>> one;
  one.push_back(started(alone, ran_in[1], state, prompt[1], sampling));
  GenerationStats s1;
  generate_replies(alone, std::move(one), {}, [&](std::unique_ptr<Reply> r) { single = r->tokens(); }, s1);
  CHECK(single == got[1]);
  CHECK(int64_t(state.context.size()) == prompt[1] + s1.decoded_tokens);  // the conversation grew by what was fed
  CHECK(state.next_position == prompt[1] + s1.decoded_tokens);
}

TEST_CASE("generation loop: length, context and interrupt stops keep the last sampled token unfed") {
  ScriptedModel model;
  model.length[0] = 500;
  GenerationStats stats;
  auto run = [&](const SamplingOptions& sampling, TextCallback on_text = {}) {
    SequenceState state;
    std::unique_ptr<Reply> done;
    std::vector<std::unique_ptr<Reply>> one;
    one.push_back(started(model, 0, state, 4, sampling, std::move(on_text)));
    generate_replies(model, std::move(one), {}, [&](std::unique_ptr<Reply> r) { done = std::move(r); }, stats);
    return done;
  };
  auto r = run(greedy(6));
  CHECK(r->stop_reason() == "length");
  CHECK(r->tokens().size() == 6);
  REQUIRE(r->last_unfed());
  CHECK(*r->last_unfed() == r->tokens().back());

  model.max_context = 4 + 3;  // the prompt and three more
  r = run(greedy(50));
  CHECK(r->stop_reason() == "context");
  CHECK(r->tokens().size() == 3);
  CHECK(r->last_unfed());
  model.max_context = 1000;

  int pieces = 0;
  r = run(greedy(50), [&](const std::string&) { return ++pieces < 2; });
  CHECK(r->stop_reason() == "interrupted");
  CHECK(r->tokens().size() == 2);  // one character each
  CHECK(pieces == 2);
  CHECK(r->last_unfed());
}

TEST_CASE("generation loop: a model error ends the loop; no sequence took the failed step's tokens") {
  ScriptedModel model;
  model.length[1] = model.length[2] = 500;
  model.fail_at_call = 3;
  SequenceState a, b;
  std::vector<std::unique_ptr<Reply>> two;
  two.push_back(started(model, 1, a, 4, greedy(50)));
  two.push_back(started(model, 2, b, 6, greedy(50)));
  GenerationStats stats;
  CHECK_THROWS_WITH(generate_replies(model, std::move(two), {}, [](std::unique_ptr<Reply>) {}, stats),
                    "model failed");
  CHECK(a.context.size() == 4 + 3);
  CHECK(b.context.size() == 6 + 3);
  CHECK(stats.decoded_tokens == 6);
}

TEST_CASE("generation loop: a cancelled reply ends before its next token; the others go on") {
  const SamplingOptions sampling = greedy(30);
  ScriptedModel model;
  model.length = {{1, 100}, {2, 100}};
  std::vector<SequenceState> states(3);
  bool cancel = false;
  int pieces = 0;
  std::vector<std::unique_ptr<Reply>> running;
  running.push_back(started(model, 1, states[1], 4, sampling, [&](const std::string&) {
    if (++pieces == 3) cancel = true;  // e.g. the client went away after its third piece
    return true;
  }));
  running.back()->set_cancel([&] { return cancel; });
  running.push_back(started(model, 2, states[2], 6, sampling));
  std::map<int64_t, std::unique_ptr<Reply>> done;
  GenerationStats stats;
  generate_replies(model, std::move(running), {}, [&](std::unique_ptr<Reply> r) { done[r->sequence()] = std::move(r); },
                   stats);
  REQUIRE(done.size() == 2);
  CHECK(done[1]->stop_reason() == "interrupted");
  CHECK(done[1]->tokens() == std::vector<int32_t>(expected_tokens(1, 4, 100, 3)));
  CHECK(done[2]->stop_reason() == "length");
  CHECK(done[2]->tokens() == expected_tokens(2, 6, 100, 30));
  // Sequence 1 was fed its three tokens, then left the decode calls.
  int64_t calls_with_1 = 0;
  for (const auto& call : model.calls) calls_with_1 += std::count(call.begin(), call.end(), 1);
  CHECK(calls_with_1 == 3);
}
