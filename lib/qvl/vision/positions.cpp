#include "qvl/vision/positions.h"

#include <ATen/ATen.h>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "qvl/error.h"

namespace qvl {
namespace {

int64_t table_side(const VisionConfig& cfg) {
  auto side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(cfg.num_position_embeddings))));
  if (side * side != cfg.num_position_embeddings)
    throw Error(fmt::format("config.json: vision num_position_embeddings {} is not a square",
                            cfg.num_position_embeddings));
  return side;
}

void check_grid(const ImageGrid& g, int64_t merge, size_t which) {
  if (g.t < 1 || g.h < 1 || g.w < 1 || g.h % merge || g.w % merge)
    throw Error(fmt::format("image {}: patch grid {}x{}x{} is not a positive multiple of the {}x{} merge window",
                            which, g.t, g.h, g.w, merge, merge));
}

}  // namespace

VisionPositions vision_positions(const VisionConfig& cfg, const std::vector<ImageGrid>& grids) {
  if (grids.empty()) throw Error("vision encoder: no images given");
  const int64_t merge = cfg.spatial_merge_size;
  const int64_t side = table_side(cfg);
  const int64_t head_dim = cfg.hidden_size / cfg.num_heads;
  if (cfg.num_heads < 1 || cfg.hidden_size % cfg.num_heads || head_dim % 4)
    throw Error(fmt::format("config.json: vision hidden_size {} over {} heads does not give a head size divisible by 4",
                            cfg.hidden_size, cfg.num_heads));
  // Half of each head rotates by row, half by column; each half uses quarter-dim frequencies.
  const int64_t freqs = head_dim / 4;
  int64_t total = 0;
  for (size_t i = 0; i < grids.size(); ++i) {
    check_grid(grids[i], merge, i);
    total += grids[i].patches();
  }

  // float32 throughout, as the reference computes it, so the weights agree to the last bit or so.
  std::vector<float> inv_freq(freqs);
  for (int64_t j = 0; j < freqs; ++j)
    inv_freq[j] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * j) / static_cast<float>(2 * freqs));

  VisionPositions out;
  out.pos_index = at::empty({4, total}, at::kLong);
  out.pos_weight = at::empty({4, total}, at::kFloat);
  at::Tensor angles = at::empty({total, 2 * freqs}, at::kFloat);
  auto index = out.pos_index.accessor<int64_t, 2>();
  auto weight = out.pos_weight.accessor<float, 2>();
  auto angle = angles.accessor<float, 2>();

  int64_t n = 0;
  for (const ImageGrid& g : grids) {
    // The learned table covers the image whatever its size: patch rows map evenly onto 0..side-1.
    at::Tensor ys = at::linspace(0, static_cast<double>(side - 1), g.h, at::kFloat);
    at::Tensor xs = at::linspace(0, static_cast<double>(side - 1), g.w, at::kFloat);
    const float* y = ys.data_ptr<float>();
    const float* x = xs.data_ptr<float>();
    for (int64_t frame = 0; frame < g.t; ++frame) {
      out.seq_lens.push_back(g.h * g.w);
      for (int64_t block_row = 0; block_row < g.h / merge; ++block_row)
        for (int64_t block_col = 0; block_col < g.w / merge; ++block_col)
          for (int64_t r = 0; r < merge; ++r)
            for (int64_t c = 0; c < merge; ++c, ++n) {
              const int64_t row = block_row * merge + r, col = block_col * merge + c;
              const int64_t y0 = static_cast<int64_t>(y[row]), x0 = static_cast<int64_t>(x[col]);
              const int64_t y1 = std::min(y0 + 1, side - 1), x1 = std::min(x0 + 1, side - 1);
              const float dy = y[row] - static_cast<float>(y0), dx = x[col] - static_cast<float>(x0);
              index[0][n] = y0 * side + x0;
              index[1][n] = y0 * side + x1;
              index[2][n] = y1 * side + x0;
              index[3][n] = y1 * side + x1;
              weight[0][n] = (1 - dy) * (1 - dx);
              weight[1][n] = (1 - dy) * dx;
              weight[2][n] = dy * (1 - dx);
              weight[3][n] = dy * dx;
              for (int64_t j = 0; j < freqs; ++j) {
                angle[n][j] = static_cast<float>(row) * inv_freq[j];
                angle[n][freqs + j] = static_cast<float>(col) * inv_freq[j];
              }
            }
    }
  }
  at::Tensor both_halves = at::cat({angles, angles}, 1);
  out.rope_cos = both_halves.cos();
  out.rope_sin = both_halves.sin();
  return out;
}

}  // namespace qvl
