#include <doctest/doctest.h>

#include <map>
#include <vector>

#include "qvl/error.h"
#include "qvl/generate/sampler.h"

using namespace qvl;

TEST_CASE("greedy picks the first maximum") {
  SamplingOptions o;
  Sampler s(o);
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  CHECK(s.next(logits.data(), 4, {}, {}) == 1);
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits of seen tokens") {
  SamplingOptions o;
  o.repetition_penalty = 2.0;
  Sampler s(o);
  std::vector<float> logits = {3.0f, 2.0f, -1.0f};
  // Token 0 was seen: 3 -> 1.5, so token 1 (2.0) wins.
  CHECK(s.next(logits.data(), 3, {0, 0, 2}, {}) == 1);
  CHECK(logits[0] == doctest::Approx(1.5));
  CHECK(logits[2] == doctest::Approx(-2.0));
}

TEST_CASE("presence penalty subtracts once per distinct generated token") {
  SamplingOptions o;
  o.presence_penalty = 1.5;
  Sampler s(o);
  std::vector<float> logits = {3.0f, 2.0f};
  CHECK(s.next(logits.data(), 2, {}, {0, 0}) == 1);
  CHECK(logits[0] == doctest::Approx(1.5));
}

TEST_CASE("sampling: seeded, top-k 1 is greedy, top-p keeps the head of the distribution") {
  SamplingOptions o;
  o.greedy = false;
  o.temperature = 0.7;
  o.seed = 42;
  std::vector<float> base = {1.0f, 3.0f, 0.5f, 2.9f, -4.0f};
  auto draw = [&](SamplingOptions opt, int n) {
    Sampler s(opt);
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      auto l = base;
      out.push_back(s.next(l.data(), int64_t(l.size()), {}, {}));
    }
    return out;
  };
  CHECK(draw(o, 50) == draw(o, 50));  // same seed, same stream
  auto k1 = o;
  k1.top_k = 1;
  for (int32_t t : draw(k1, 20)) CHECK(t == 1);
  auto p = o;
  p.top_p = 0.6;  // tokens 1 and 3 hold ~0.93 of the mass between them; 1 alone ~0.53
  std::map<int32_t, int> counts;
  for (int32_t t : draw(p, 400)) counts[t]++;
  CHECK(counts.size() == 2);
  CHECK(counts.count(1) == 1);
  CHECK(counts.count(3) == 1);
}

TEST_CASE("invalid sampling settings are errors") {
  SamplingOptions o;
  o.greedy = false;
  o.temperature = 0;
  CHECK_THROWS_AS(Sampler{o}, Error);
  o.temperature = 1;
  o.top_p = 0;
  CHECK_THROWS_AS(Sampler{o}, Error);
}

TEST_CASE("generation_config defaults carry over") {
  GenerationConfig g;
  g.do_sample = true;
  g.top_k = 20;
  g.top_p = 0.8;
  g.temperature = 0.7;
  auto o = SamplingOptions::from_generation_config(g);
  CHECK_FALSE(o.greedy);
  CHECK(o.top_k == 20);
  CHECK(o.eos_token_ids == std::vector<int64_t>{151645, 151643});
  Sampler s(o);
  CHECK(s.is_eos(151645));
  CHECK_FALSE(s.is_eos(1));
}
