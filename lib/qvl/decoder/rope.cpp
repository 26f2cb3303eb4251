#include "qvl/decoder/rope.h"

#include <fmt/format.h>

#include <cmath>

#include "qvl/error.h"

namespace qvl {

MultimodalRope::MultimodalRope(const TextConfig& cfg) {
  const int64_t half = cfg.head_dim / 2;
  const auto& section = cfg.mrope_section;
  if (cfg.head_dim % 2 != 0 || section[0] + section[1] + section[2] != half)
    throw Error(fmt::format("mrope_section [{}, {}, {}] must sum to head_dim/2 = {}", section[0], section[1],
                            section[2], half));

  axis_of_.assign(half, 0);
  if (cfg.mrope_interleaved) {
    // Height and width take every third frequency (offsets 1 and 2) for as many
    // frequencies as their section holds; everything else stays temporal.
    for (int64_t axis = 1; axis <= 2; ++axis)
      for (int64_t i = axis; i < 3 * section[axis] && i < half; i += 3) axis_of_[i] = axis;
  } else {
    for (int64_t i = section[0]; i < section[0] + section[1]; ++i) axis_of_[i] = 1;
    for (int64_t i = section[0] + section[1]; i < half; ++i) axis_of_[i] = 2;
  }
  axis_index_ = at::tensor(axis_of_, at::kLong);

  // Same float32 arithmetic as the reference: theta ** (2i / head_dim), inverted.
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(cfg.head_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(cfg.rope_theta), exponent);
  }
  inv_freq_ = at::tensor(inv, at::kFloat);
}

RopeTables MultimodalRope::tables(const at::Tensor& positions) const {
  // angle[l, i] = position of token l on the axis driving frequency i, times that frequency.
  at::Tensor pos = positions.to(at::kFloat).index_select(0, axis_index_);  // [half, L]
  at::Tensor angle = pos.t() * inv_freq_;                                   // [L, half]
  at::Tensor full = at::cat({angle, angle}, 1);
  return {full.cos(), full.sin()};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTables& rope) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor cos = rope.cos.unsqueeze(1);  // broadcast over heads
  at::Tensor sin = rope.sin.unsqueeze(1);
  at::Tensor rotated = at::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos + rotated * sin).to(x.scalar_type());
}

}  // namespace qvl
