// The Qwen3-VL text decoder on ATen: embeddings, the decoder layers with a KV
// cache, the final norm and the language-model head. Image features arrive
// already scattered into the input embeddings; the deepstack features of the
// vision encoder are added after the first decoder layers.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "qvl/decoder/options.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"

namespace qvl {

class DecoderWeights;
class KvCache;
class LayerWorkspace;
class MultimodalRope;

struct DeepstackInput {
  at::Tensor visual_mask;            // [L] bool: which of the L new tokens are image tokens
  std::vector<at::Tensor> features;  // per deepstack layer: [mask.sum(), hidden]
};

// What transformers records as hidden_states: the input embeddings, the output
// of each decoder layer but the last (before deepstack features are added), and
// the final-normed output. num_hidden_layers + 1 tensors [L, hidden].
struct ForwardTrace {
  std::vector<at::Tensor> hidden_states;
};

class Decoder {
 public:
  // ckpt must outlive the decoder: in-place weights alias its mapping.
  Decoder(const Checkpoint& ckpt, const TextConfig& cfg, const DecoderOptions& opts);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  at::Tensor embed(const std::vector<int32_t>& ids) const;  // [L, hidden] in the compute dtype

  // Appends L tokens at cache positions [cached(), cached() + L).
  // embeds: [L, hidden]; positions: [3, L] int64 (t, h, w mrope ids).
  // Returns float32 logits [vocab] of the last new token, or [L, vocab] when all_logits.
  // On error (bad shapes, context full) the cache is left as it was.
  at::Tensor forward(const at::Tensor& embeds, const at::Tensor& positions, const DeepstackInput* deepstack = nullptr,
                     bool all_logits = false, ForwardTrace* trace = nullptr);

  int64_t cached() const;
  int64_t max_context() const { return opts_.max_context; }
  void truncate(int64_t n_tokens);  // drop cache entries from n_tokens on
  void reset();

  const TextConfig& config() const { return cfg_; }
  at::ScalarType dtype() const { return opts_.dtype; }
  int64_t layers_loaded() const;  // how many layers' weights are ready (lazy mode fills this as layers run)

 private:
  TextConfig cfg_;
  DecoderOptions opts_;
  // Lazy loading happens behind const embed() too, hence a pointer member.
  std::unique_ptr<DecoderWeights> weights_;
  std::unique_ptr<MultimodalRope> rope_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<LayerWorkspace> workspace_;
  at::Tensor logits_buffer_;  // [1, vocab] for the usual last-token case
};

}  // namespace qvl
