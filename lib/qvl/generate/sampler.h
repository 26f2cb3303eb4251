// Picks the next token from float32 logits: greedy, or sampled after the
// reference's logits processors (repetition penalty, then temperature, top-k
// and top-p), plus an additive presence penalty on tokens already generated.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "qvl/model/config.h"

namespace qvl {

struct SamplingOptions {
  bool greedy = true;
  double temperature = 1.0;
  int64_t top_k = 0;        // 0: off
  double top_p = 1.0;       // 1: off
  double repetition_penalty = 1.0;
  double presence_penalty = 0.0;
  uint64_t seed = 0;
  int64_t max_new_tokens = 512;
  bool ignore_eos = false;  // benchmarks: always generate max_new_tokens, so decode speed covers a fixed count
  std::vector<int64_t> eos_token_ids = {151645, 151643};

  // Defaults the model ships in generation_config.json.
  static SamplingOptions from_generation_config(const GenerationConfig& g);
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  // logits: vocab floats (modified in place). context: prompt + generated ids,
  // for the repetition penalty; generated: ids produced so far, for presence.
  int32_t next(float* logits, int64_t vocab, const std::vector<int32_t>& context,
               const std::vector<int32_t>& generated);
  bool is_eos(int32_t id) const;
  const SamplingOptions& options() const { return opt_; }

 private:
  SamplingOptions opt_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;  // reused between steps
};

int32_t argmax(const float* logits, int64_t n);

// Throws qvl::Error, naming the likely cause, when the logits hold a NaN or an
// infinity: no token can be chosen from them, and what argmax would pick is
// garbage. Sampler::next checks every step with it.
void check_logits_finite(const float* logits, int64_t n);

}  // namespace qvl
