// The reference's decoder inputs for each golden model case, and greedy
// decoding as the reference ran it: shared by the decoder and int8 suites.
#pragma once
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "qvl/decoder/decoder.h"
#include "torch_test_support.h"

namespace qvl::test {

struct Prompt {
  at::Tensor embeds;     // [L, hidden] float32
  at::Tensor positions;  // [3, L] int64
  std::optional<DeepstackInput> deepstack;
  int64_t length() const { return embeds.size(0); }
  const DeepstackInput* deepstack_ptr() const { return deepstack ? &*deepstack : nullptr; }
};

inline Prompt load_prompt(const std::string& name) {
  Prompt p;
  p.embeds = golden(name + ".inputs_embeds");
  const int64_t L = p.embeds.size(0);
  if (has_golden(name + ".position_ids"))
    p.positions = golden(name + ".position_ids").reshape({3, L});
  else  // text only: the reference uses 0..L-1 on all three axes
    p.positions = at::arange(L, at::kLong).expand({3, L}).contiguous();
  if (has_golden(name + ".visual_pos_masks")) {
    DeepstackInput ds;
    ds.visual_mask = golden(name + ".visual_pos_masks").to(at::kBool);
    for (int i = 0; has_golden(name + ".deepstack_visual_embeds." + std::to_string(i)); ++i)
      ds.features.push_back(golden(name + ".deepstack_visual_embeds." + std::to_string(i)));
    p.deepstack = ds;
  }
  return p;
}

inline const nlohmann::json& model_case(const std::string& name) { return goldens()["model_cases"][name]; }

inline int64_t top1(const at::Tensor& logits) { return logits.argmax().item<int64_t>(); }
inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

// Greedy decoding as the reference ran it: decode steps continue the position
// ids from one past the prompt's largest, equal on all three axes.
inline std::vector<int64_t> greedy(Decoder& dec, const Prompt& p, int max_new) {
  dec.reset();
  at::Tensor logits = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
  const int64_t next_position = p.positions.max().item<int64_t>() + 1;
  std::vector<int64_t> out;
  for (int step = 0; step < max_new; ++step) {
    const int64_t token = top1(logits);
    out.push_back(token);
    if (std::find(kStopIds.begin(), kStopIds.end(), token) != kStopIds.end() || step + 1 == max_new) break;
    logits = dec.decode({0}, {static_cast<int32_t>(token)}, {next_position + step})[0];
  }
  return out;
}

}  // namespace qvl::test
