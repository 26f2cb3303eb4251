// Multimodal rotary position embedding (MRoPE) of the Qwen3-VL text decoder.
//
// Every token has three position ids (temporal, height, width); text tokens
// have the same id on all three. Each of the head_dim/2 rotary frequencies is
// driven by one of the three axes: with the interleaved layout (Qwen3-VL) the
// first 3*min(section) frequencies cycle T,H,W,T,H,W,... and the rest stay T;
// the chunked layout (Qwen2-VL) gives the first section[0] frequencies to T,
// the next section[1] to H, the last section[2] to W.
#pragma once
#include <ATen/ATen.h>

#include "qvl/model/config.h"

namespace qvl {

struct RopeTables {
  at::Tensor cos;  // [L, head_dim] float32
  at::Tensor sin;  // [L, head_dim] float32
};

class MultimodalRope {
 public:
  explicit MultimodalRope(const TextConfig& cfg);
  // positions: [3, L] int64 (t, h, w ids).
  RopeTables tables(const at::Tensor& positions) const;
  // Which position axis (0 t, 1 h, 2 w) drives frequency i.
  const std::vector<int64_t>& axis_of_frequency() const { return axis_of_; }

 private:
  std::vector<int64_t> axis_of_;
  at::Tensor axis_index_;  // axis_of_ as an int64 tensor
  at::Tensor inv_freq_;    // [head_dim/2] float32
};

// Rotates x [L, heads, head_dim] by the tables (the "rotate half" pairing of
// dimension j with j + head_dim/2). Computes in float32, returns x's dtype.
at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope);

}  // namespace qvl
