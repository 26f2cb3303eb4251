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
struct SequenceRows;

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

// The decoder keeps one KV cache per sequence; sequence 0 always exists (a
// conversation), more serve batched decoding. The model runs two ways, one per
// purpose: prefill() appends a run of new tokens (a prompt, with its image
// features) to one sequence; decode() appends one sampled token to each of
// several sequences at once, so every weight read serves all of them.
class Decoder {
 public:
  // ckpt must outlive the decoder: in-place weights alias its mapping.
  Decoder(const Checkpoint& ckpt, const TextConfig& cfg, const DecoderOptions& opts);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  at::Tensor embed(const std::vector<int32_t>& ids) const;  // [L, hidden] in the compute dtype

  // Appends L tokens to `sequence` at cache positions [cached(), cached() + L).
  // embeds: [L, hidden]; positions: [3, L] int64 (t, h, w mrope ids).
  // Returns float32 logits [vocab] of the last new token, or [L, vocab] when all_logits.
  // On error (bad shapes, context full) the cache is left as it was.
  at::Tensor prefill(int64_t sequence, const at::Tensor& embeds, const at::Tensor& positions,
                     const DeepstackInput* deepstack = nullptr, bool all_logits = false, ForwardTrace* trace = nullptr);

  // One new token for each of several different sequences, computed together:
  // tokens[i] joins sequences[i] at text position positions[i] (equal on the
  // three mrope axes). Returns float32 logits [B, vocab]. On error no cache changes.
  at::Tensor decode(const std::vector<int64_t>& sequences, const std::vector<int32_t>& tokens,
                    const std::vector<int64_t>& positions);

  // How many sequences have a cache; new ones start empty, dropped ones are freed.
  void set_sequences(int64_t n);
  int64_t sequences() const { return int64_t(caches_.size()); }

  int64_t cached(int64_t sequence = 0) const;
  void truncate(int64_t n_tokens, int64_t sequence = 0);  // drop cache entries from n_tokens on
  void reset();                          // every sequence
  void reset_sequence(int64_t sequence);

  // The keys or values of a sequence's first n cached tokens in one layer:
  // [kv_heads, n, head_dim] views into the cache (copy them before the
  // sequence changes). For saving a prompt's prefix (session/prompt_cache.h).
  at::Tensor cached_keys(int64_t layer, int64_t n, int64_t sequence = 0) const;
  at::Tensor cached_values(int64_t layer, int64_t n, int64_t sequence = 0) const;
  // Fills an empty sequence with saved keys and values, one [kv_heads, n,
  // head_dim] tensor per layer each. Throws, the sequence left empty, unless
  // it is empty and every shape fits.
  void restore(int64_t sequence, const std::vector<at::Tensor>& keys, const std::vector<at::Tensor>& values);

  const TextConfig& config() const { return cfg_; }
  at::ScalarType dtype() const { return opts_.dtype; }
  int64_t layers_loaded() const;  // how many layers' weights are ready (lazy mode fills this as layers run)

 private:
  KvCache& cache(int64_t sequence) const;
  // float32 logits [rows, vocab] of a few final-normed rows (the last of a prompt, one per decoded sequence).
  at::Tensor logits_of(const at::Tensor& normed);
  // Runs every layer over hidden [L, hidden], whose rows extend the given
  // sequences in order, commits the new tokens and returns the final-normed rows.
  at::Tensor run_layers(at::Tensor hidden, const at::Tensor& positions, const std::vector<SequenceRows>& parts,
                        const DeepstackInput* deepstack, ForwardTrace* trace);

  TextConfig cfg_;
  DecoderOptions opts_;
  // Lazy loading happens behind const embed() too, hence a pointer member.
  std::unique_ptr<DecoderWeights> weights_;
  std::unique_ptr<MultimodalRope> rope_;
  std::vector<std::unique_ptr<KvCache>> caches_;  // one per sequence
  std::unique_ptr<LayerWorkspace> workspace_;
  at::Tensor logits_buffer_;  // [rows, vocab] in the compute dtype, reused while the row count stays
};

}  // namespace qvl
