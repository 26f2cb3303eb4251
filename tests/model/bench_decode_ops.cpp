// Speed of the decode step's non-matmul work on the Qwen3-VL-2B shapes: the
// ATen formulation layer.cpp used before the kernels against the kernels of
// kernels/decode_ops.h on every tier this CPU runs (kernels/cpu.h), summed
// over the 28 layers of one step, for batches of 1 and 8 sequences at two
// context lengths. Each layer has its own KV cache per sequence, so the
// attention streams as much cache as a real step does. The variants run
// alternately in one process; each figure is the minimum over repetitions.
//
//   qvl_bench_decode_ops [repetitions=7] [dtype=bf16|f32] [threads=all cores]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "qvl/kernels/cpu.h"
#include "qvl/kernels/decode_ops.h"
#include "qvl/tensor/aten_sum_order.h"

using namespace qvl::kernels;

namespace {

constexpr int kLayers = 28;
constexpr int64_t kHidden = 2048, kHeads = 16, kKvHeads = 8, kHeadDim = 128, kIntermediate = 6144;
constexpr double kEps = 1e-6;

enum Part { kNorms, kQkNormRope, kAttention, kSiluMul, kResidual, kParts };
const std::array<const char*, kParts> kPartNames = {"rms norms (2/layer)", "q/k norm + rope", "attention",
                                                     "silu * up", "residual adds (2/layer)"};
using Times = std::array<double, kParts>;

struct Layer {
  at::Tensor input_norm, post_norm, q_norm, k_norm;  // weights
  std::vector<at::Tensor> keys, values;              // per sequence [kv, capacity, head_dim]
  // The layer's own SiLU input, restored before every run: run in place 28
  // times on one tensor, silu(g)·up drifts to denormals, which time nothing real.
  at::Tensor gate;
};

// Activations of one step, shared by all layers (their values do not matter
// for speed, only that they stay finite).
struct Step {
  at::Tensor hidden, q, k, o, up, down, cos, sin;
};

struct Clock {
  Times& times;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  void lap(Part part) {
    const auto now = std::chrono::steady_clock::now();
    times[part] += std::chrono::duration<double>(now - start).count();
    start = now;
  }
};

at::Tensor aten_rms_norm(const at::Tensor& x, const at::Tensor& weight) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv_rms = at::rsqrt(xf.square().mean(-1, true).add_(kEps));
  return (xf * inv_rms).to(x.scalar_type()) * weight;
}
at::Tensor aten_rope(const at::Tensor& x, const at::Tensor& cos_table, const at::Tensor& sin_table) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor rotated = at::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos_table.unsqueeze(1) + rotated * sin_table.unsqueeze(1)).to(x.scalar_type());
}
// layer.cpp's attend_block for one query (no causal mask needed).
void aten_attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, at::Tensor out) {
  const int64_t group = kHeads / kKvHeads;
  at::Tensor grouped = q.view({1, kKvHeads, group, kHeadDim}).permute({1, 2, 0, 3}).reshape({kKvHeads, group, kHeadDim});
  at::Tensor scores = at::bmm(grouped.to(at::kFloat), keys.transpose(1, 2).to(at::kFloat));
  scores.mul_(1.0 / std::sqrt(double(kHeadDim)));
  at::Tensor probs = at::softmax(scores, -1).to(values.scalar_type());
  at::Tensor mixed = at::bmm(probs, values);
  out.view({1, kKvHeads, group, kHeadDim}).copy_(mixed.view({kKvHeads, group, 1, kHeadDim}).permute({2, 0, 1, 3}));
}

Times run_aten(std::vector<Layer>& layers, Step& s, int64_t batch, int64_t context) {
  Times t{};
  at::Tensor hidden = s.hidden;
  at::Tensor attn = at::empty({batch, kHeads * kHeadDim}, s.q.options());
  for (Layer& layer : layers) {
    Clock clock{t};
    at::Tensor x = aten_rms_norm(hidden, layer.input_norm);
    clock.lap(kNorms);
    at::Tensor q = aten_rope(aten_rms_norm(s.q.view({batch, kHeads, kHeadDim}), layer.q_norm), s.cos, s.sin);
    at::Tensor k = aten_rope(aten_rms_norm(s.k.view({batch, kKvHeads, kHeadDim}), layer.k_norm), s.cos, s.sin);
    clock.lap(kQkNormRope);
    for (int64_t b = 0; b < batch; ++b)
      aten_attend(q[b], layer.keys[b].narrow(1, 0, context), layer.values[b].narrow(1, 0, context), attn[b]);
    clock.lap(kAttention);
    at::Tensor h = hidden + s.o;
    clock.lap(kResidual);
    x = aten_rms_norm(h, layer.post_norm);
    clock.lap(kNorms);
    at::silu_(layer.gate).mul_(s.up);
    clock.lap(kSiluMul);
    hidden = h.add_(s.down);
    clock.lap(kResidual);
  }
  return t;
}

Times run_kernels(std::vector<Layer>& layers, Step& s, int64_t batch, int64_t context, Storage st, Isa isa) {
  Times t{};
  at::Tensor hidden = s.hidden.clone(), x = at::empty_like(hidden);
  at::Tensor q = at::empty_like(s.q), k = at::empty_like(s.k);
  at::Tensor attn = at::empty({batch, kHeads * kHeadDim}, s.q.options());
  std::vector<KvSequence> sequences(batch);
  const int lanes = qvl::tensor::aten_sum_lanes();
  for (Layer& layer : layers) {
    Clock clock{t};
    rms_norm_rows(st, hidden.data_ptr(), layer.input_norm.data_ptr(), x.data_ptr(), batch, kHidden, kEps, lanes, isa);
    clock.lap(kNorms);
    const float* cos = s.cos.data_ptr<float>();
    const float* sin = s.sin.data_ptr<float>();
    head_norm_rope(st, s.q.data_ptr(), layer.q_norm.data_ptr(), cos, sin, q.data_ptr(), batch, kHeads, kHeadDim, kEps,
                   lanes, isa);
    head_norm_rope(st, s.k.data_ptr(), layer.k_norm.data_ptr(), cos, sin, k.data_ptr(), batch, kKvHeads, kHeadDim,
                   kEps, lanes, isa);
    clock.lap(kQkNormRope);
    for (int64_t b = 0; b < batch; ++b)
      sequences[b] = {layer.keys[b].data_ptr(), layer.values[b].data_ptr(), layer.keys[b].size(1), context};
    decode_attention(st, q.data_ptr(), sequences.data(), batch, {kHeads, kKvHeads, kHeadDim}, attn.data_ptr(), isa);
    clock.lap(kAttention);
    hidden.add_(s.o);  // as layer.cpp adds the residual
    clock.lap(kResidual);
    rms_norm_rows(st, hidden.data_ptr(), layer.post_norm.data_ptr(), x.data_ptr(), batch, kHidden, kEps, lanes, isa);
    clock.lap(kNorms);
    silu_mul(st, layer.gate.data_ptr(), s.up.data_ptr(), layer.gate.numel(), isa);
    clock.lap(kSiluMul);
    hidden.add_(s.down);
    clock.lap(kResidual);
  }
  return t;
}

double total(const Times& t) {
  double sum = 0;
  for (double v : t) sum += v;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const bool f32 = argc > 2 && std::string(argv[2]) == "f32";
  const at::ScalarType dtype = f32 ? at::kFloat : at::kBFloat16;
  const Storage st = f32 ? Storage::F32 : Storage::BF16;
  // The session runs on every usable core; libtorch alone may guess fewer.
  at::set_num_threads(argc > 3 ? std::max(1, std::atoi(argv[3])) : int(std::thread::hardware_concurrency()));
  std::vector<Isa> tiers;
  for (Isa isa : {Isa::Generic, Isa::Neon, Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) tiers.push_back(isa);
  fmt::print("dtype {}, ATen threads {}, kernels' tiers: {}; {} repetitions (min)\n", c10::toString(dtype),
             at::get_num_threads(), isa_description(), repetitions);
  for (int64_t batch : {1, 8}) {
    for (int64_t context : {300, 1000}) {
      at::manual_seed(1);
      std::vector<Layer> layers(kLayers);
      for (Layer& layer : layers) {
        const auto weight = [&](int64_t n) { return (at::rand({n}) + 0.5).to(dtype); };
        layer.input_norm = weight(kHidden), layer.post_norm = weight(kHidden);
        layer.q_norm = weight(kHeadDim), layer.k_norm = weight(kHeadDim);
        for (int64_t b = 0; b < batch; ++b) {
          layer.keys.push_back(at::randn({kKvHeads, context, kHeadDim}).to(dtype));
          layer.values.push_back(at::randn({kKvHeads, context, kHeadDim}).to(dtype));
        }
      }
      Step s;
      const auto act = [&](int64_t width) { return at::randn({batch, width}).to(dtype); };
      s.hidden = act(kHidden), s.o = act(kHidden), s.down = act(kHidden);
      s.q = act(kHeads * kHeadDim), s.k = act(kKvHeads * kHeadDim);
      s.up = act(kIntermediate);
      const at::Tensor angles = at::rand({batch, kHeadDim / 2}) * 1000;
      s.cos = at::cat({angles, angles}, 1).cos(), s.sin = at::cat({angles, angles}, 1).sin();
      // silu_mul works in place: its inputs are restored between runs (outside
      // the timed regions).
      const at::Tensor gate0 = act(kIntermediate);
      for (Layer& layer : layers) layer.gate = gate0.clone();

      // [0] is ATen, [1 + i] tier i.
      const size_t variants = 1 + tiers.size();
      std::vector<Times> best(variants);
      std::vector<double> best_total(variants, 1e30);
      for (Times& t : best) t.fill(1e30);
      for (int rep = 0; rep <= repetitions; ++rep) {  // rep 0 warms up
        for (size_t v = 0; v < variants; ++v) {
          for (Layer& layer : layers) layer.gate.copy_(gate0);
          const Times t = v == 0 ? run_aten(layers, s, batch, context)
                                 : run_kernels(layers, s, batch, context, st, tiers[v - 1]);
          if (rep == 0) continue;
          for (int p = 0; p < kParts; ++p) best[v][p] = std::min(best[v][p], t[p]);
          best_total[v] = std::min(best_total[v], total(t));
        }
      }
      fmt::print("\n== batch {}, context {}: ms per decode step (28 layers)\n", batch, context);
      fmt::print("  {:<26} {:>9}", "", "ATen");
      for (Isa isa : tiers) fmt::print(" {:>9}", isa_name(isa));
      fmt::print("\n");
      const auto row = [&](const char* name, const auto& value) {
        fmt::print("  {:<26}", name);
        for (size_t v = 0; v < variants; ++v) fmt::print(" {:9.3f}", value(v) * 1e3);
        fmt::print("\n");
      };
      for (int p = 0; p < kParts; ++p) row(kPartNames[p], [&](size_t v) { return best[v][p]; });
      row("step total", [&](size_t v) { return best_total[v]; });
    }
  }
  return 0;
}
