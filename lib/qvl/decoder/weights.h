// The text decoder's weights as ATen tensors in the compute dtype.
//
// When the checkpoint already holds the compute dtype the tensors alias the
// mmapped file (read-only: never write to them); otherwise they are converted
// copies. Every tensor the config implies is checked (present, shape, float
// dtype) in the constructor, before any weight byte is read.
//
// With WeightQuant::Int8 the projections and the lm_head are int8 matrices in
// a mapped cache file (made in the constructor if needed) and the checkpoint's
// projection weights are never read again; the norms stay as above, and the
// embedding table stays on the checkpoint, where a lookup reads a few rows
// from the file (not through the mapping: torch_view.h).
// WeightQuant::Int4 is the same with 4-bit matrices (decoder/int4_weights.h).
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qvl/decoder/options.h"
#include "qvl/io/page_prefetch.h"
#include "qvl/io/safetensors.h"
#include "qvl/kernels/int4_cache.h"
#include "qvl/kernels/int8_cache.h"
#include "qvl/tensor/linear.h"
#include "qvl/model/checkpoint_layout.h"  // ExpectedTensor
#include "qvl/model/config.h"

namespace qvl {

struct LayerWeights {
  at::Tensor input_norm;           // [hidden]
  at::Tensor post_attention_norm;  // [hidden]
  tensor::LinearWeight q_proj, k_proj, v_proj, o_proj;
  at::Tensor q_bias, k_bias, v_bias, o_bias;  // undefined unless config.attention_bias
  at::Tensor q_norm, k_norm;                  // [head_dim]
  tensor::LinearWeight gate_proj, up_proj, down_proj;
};

class DecoderWeights {
 public:
  // lazy: a layer's tensors are made (and its pages touched) when first asked
  // for, the pages populated meanwhile by a background thread (opts.prefetch);
  // eager: everything now, the pages of in-place views populated first on
  // opts.populate_threads threads (a file truncated under the mapping is a
  // qvl::Error here, not a SIGBUS later).
  // Uses opts.dtype, lazy and the quantization fields.
  DecoderWeights(const Checkpoint& ckpt, const TextConfig& cfg, const DecoderOptions& opts);

  // The embedding rows of ids (each in 0..vocab-1), [ids, hidden] in the compute dtype.
  at::Tensor embedding_rows(const std::vector<int32_t>& ids);
  const at::Tensor& final_norm();            // [hidden]
  const tensor::LinearWeight& lm_head();   // [vocab, hidden]; the embedding table when tied (and not quantized)
  const LayerWeights& layer(int64_t i);

  int64_t layers_loaded() const;
  // The lazy-mode prefetch thread (null when off or eager), for tests.
  PagePrefetcher* prefetcher() { return prefetch_.get(); }

 private:
  // A checkpoint tensor checked against the config, not yet turned into an at::Tensor.
  struct Source {
    const TensorView* view = nullptr;  // null for optional tensors that are absent
  };
  struct LayerSources {
    Source input_norm, post_attention_norm, q_proj, k_proj, v_proj, o_proj, q_bias, k_bias, v_bias, o_bias,
        q_norm, k_norm, gate_proj, up_proj, down_proj;
  };

  // Looks the tensor up, with its shape and dtype checked (one-line errors).
  Source require(const ExpectedTensor& tensor);
  at::Tensor materialize(const Source& s) const;
  // The quantized matrix `name` (int8 or int4 mode), else the checkpoint's.
  tensor::LinearWeight projection(const Source& s, const std::string& name) const;
  bool quantized() const { return int8_ || int4_; }
  void load_layer(int64_t i);
  void load_globals();
  // Eager: maps every page a forward pass reads (and the embedding table), or throws.
  void populate_all(const PrefetchOptions& populate);
  // The bytes a forward pass reads, in the order it reads them.
  std::vector<ByteRange> forward_byte_order() const;

  const Checkpoint& ckpt_;
  at::ScalarType dtype_;
  bool lazy_;
  bool tied_;

  Source embed_src_, norm_src_, lm_head_src_;
  std::unique_ptr<kernels::Int8Cache> int8_;  // set in int8 mode
  std::unique_ptr<kernels::Int4Cache> int4_;  // set in int4 mode
  std::vector<LayerSources> layer_srcs_;

  bool globals_loaded_ = false;
  at::Tensor embed_, norm_;  // embed_: undefined when quantized
  tensor::LinearWeight lm_head_;
  std::vector<LayerWeights> layers_;
  std::vector<bool> layer_loaded_;
  // Last: stopped and joined before the mappings it reads (int8_) go.
  std::unique_ptr<PagePrefetcher> prefetch_;
};

}  // namespace qvl
