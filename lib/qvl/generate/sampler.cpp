#include "qvl/generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "qvl/error.h"

namespace qvl {

SamplingOptions SamplingOptions::from_generation_config(const GenerationConfig& g) {
  SamplingOptions o;
  o.greedy = !g.do_sample;
  o.temperature = g.temperature;
  o.top_k = g.top_k;
  o.top_p = g.top_p;
  o.repetition_penalty = g.repetition_penalty;
  o.presence_penalty = g.presence_penalty;
  o.eos_token_ids = g.eos_token_ids;
  return o;
}

int32_t argmax(const float* logits, int64_t n) {
  // First maximum wins, as torch.argmax does.
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

void check_logits_finite(const float* logits, int64_t n) {
  // x * 0 is 0 for every finite x and NaN for NaN and ±Inf: one pass without branches.
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += logits[i] * 0.0f;
  if (std::isfinite(sum)) return;
  int64_t nan = 0, inf = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) nan += 1;
    else if (std::isinf(logits[i])) inf += 1;
  }
  throw Error("the model produced " + std::to_string(nan) + " NaN and " + std::to_string(inf) +
              " infinite logits: the checkpoint contains NaN or Inf (or is corrupt: check the download, and that "
              "its dtype labels are right)");
}

Sampler::Sampler(const SamplingOptions& options) : opt_(options), rng_(options.seed) {
  if (!opt_.greedy && !(opt_.temperature > 0 && std::isfinite(opt_.temperature)))
    throw Error("temperature must be > 0 and finite (use --greedy for argmax)");
  if (!(opt_.top_p > 0 && opt_.top_p <= 1)) throw Error("top-p must be in (0, 1]");
  if (opt_.top_k < 0) throw Error("top-k must be >= 0");
  if (!(opt_.repetition_penalty > 0 && std::isfinite(opt_.repetition_penalty)))
    throw Error("repetition penalty must be > 0 and finite");
  if (!std::isfinite(opt_.presence_penalty)) throw Error("presence penalty must be finite");
}

bool Sampler::is_eos(int32_t id) const {
  return std::find(opt_.eos_token_ids.begin(), opt_.eos_token_ids.end(), id) != opt_.eos_token_ids.end();
}

int32_t Sampler::next(float* logits, int64_t vocab, const std::vector<int32_t>& context,
                      const std::vector<int32_t>& generated) {
  check_logits_finite(logits, vocab);
  if (opt_.repetition_penalty != 1.0) {
    // Each distinct seen token once: positive logits shrink, negative grow.
    std::unordered_set<int32_t> seen(context.begin(), context.end());
    const float p = float(opt_.repetition_penalty);
    for (int32_t id : seen)
      if (id >= 0 && id < vocab) logits[id] = logits[id] > 0 ? logits[id] / p : logits[id] * p;
  }
  if (opt_.presence_penalty != 0.0) {
    std::unordered_set<int32_t> seen(generated.begin(), generated.end());
    for (int32_t id : seen)
      if (id >= 0 && id < vocab) logits[id] -= float(opt_.presence_penalty);
  }
  if (opt_.greedy) return argmax(logits, vocab);

  const float inv_t = float(1.0 / opt_.temperature);
  candidates_.clear();
  candidates_.reserve(size_t(vocab));
  for (int64_t i = 0; i < vocab; ++i) candidates_.emplace_back(logits[i] * inv_t, int32_t(i));
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = candidates_.size();
  if (opt_.top_k > 0 && size_t(opt_.top_k) < keep) {
    keep = size_t(opt_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  // Softmax over the survivors.
  const float top = candidates_[0].first;
  double sum = 0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first - top);
    sum += c.first;
  }
  // Top-p keeps the smallest prefix whose mass reaches top_p (at least one token).
  if (opt_.top_p < 1.0) {
    double mass = 0;
    size_t n = 0;
    while (n < candidates_.size()) {
      mass += candidates_[n].first / sum;
      ++n;
      if (mass >= opt_.top_p) break;
    }
    candidates_.resize(n);
    sum = 0;
    for (const auto& c : candidates_) sum += c.first;
  }
  std::uniform_real_distribution<double> uniform(0.0, sum);
  double r = uniform(rng_);
  for (const auto& c : candidates_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace qvl
