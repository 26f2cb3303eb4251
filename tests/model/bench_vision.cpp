// Where the vision tower's time goes, on the 2B shapes with random weights
// (speed does not depend on values): qvl's native blocks (vision_blocks.h)
// whole, then the same 24 blocks' linears alone through tensor::linear and
// through plain ATen (at::linear, as Python torch runs them), the attention
// alone (its two matmuls through tensor::matmul, as qvl ran it before the
// fused kernel, and the fused kernel), and the ops between the matmuls; then
// int8 vision (`--quant int8`: the same weights quantized, the int8 GEMM),
// whole blocks run alternately with the bf16 ones (and with int8 linears
// but bf16's float attention scores) so all see the same machine. Minimum of
// the repetitions.
//
//   qvl_bench_vision MODEL_DIR [patch_rows=30] [patch_cols=40] [repetitions=3] [threads=all cores]
//                    [query_chunk=VisionBlocks' default]
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // NoGradGuard: ATen.h stopped bringing it in libtorch 2.x
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <chrono>
#include <ctime>
#include <sys/resource.h>
#include <cstdlib>
#include <functional>
#include <thread>
#include <map>
#include <string>

#include "qvl/kernels/attention.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/quant.h"
#include "qvl/kernels/vision_ops.h"
#include "qvl/model/precision.h"
#include "qvl/model/config.h"
#include "qvl/tensor/linear.h"
#include "qvl/vision/positions.h"
#include "qvl/vision/vision_blocks.h"

using namespace qvl;

namespace {

double process_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

// CPU seconds of the whole process, min over the repetitions, beside the
// wall-clock time: on a machine shared with other work the CPU time of one
// thread (or of passive-waiting threads) is the steadier figure.
double g_cpu = 0;
long g_faults = 0;  // minor page faults of the last repetition (fresh pages for new buffers)
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
double best_of(int reps, const std::function<void()>& f) {
  double best = 1e30;
  g_cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double c0 = process_cpu_s();
    const long f0 = minor_faults();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    g_cpu = std::min(g_cpu, process_cpu_s() - c0);
    g_faults = minor_faults() - f0;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: qvl_bench_vision MODEL_DIR [patch_rows=30] [patch_cols=40] [repetitions=3]\n");
    return 2;
  }
  const VisionConfig cfg = load_model_config(argv[1]).vision;
  ImageGrid grid;
  grid.h = argc > 2 ? std::atoll(argv[2]) : 30;
  grid.w = argc > 3 ? std::atoll(argv[3]) : 40;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 3;
  at::set_num_threads(argc > 5 ? std::atoi(argv[5]) : int(std::thread::hardware_concurrency()));
  at::NoGradGuard no_grad;
  const int64_t n = grid.patches(), hidden = cfg.hidden_size, inner = cfg.intermediate_size;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);

  std::map<std::string, at::Tensor> params;
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string p = fmt::format("blocks.{}.", i);
    params[p + "attn.qkv.weight"] = at::randn({3 * hidden, hidden}, bf16) * 0.02;
    params[p + "attn.qkv.bias"] = at::randn({3 * hidden}, bf16) * 0.02;
    params[p + "attn.proj.weight"] = at::randn({hidden, hidden}, bf16) * 0.02;
    params[p + "attn.proj.bias"] = at::randn({hidden}, bf16) * 0.02;
    params[p + "mlp.linear_fc1.weight"] = at::randn({inner, hidden}, bf16) * 0.02;
    params[p + "mlp.linear_fc1.bias"] = at::randn({inner}, bf16) * 0.02;
    params[p + "mlp.linear_fc2.weight"] = at::randn({hidden, inner}, bf16) * 0.02;
    params[p + "mlp.linear_fc2.bias"] = at::randn({hidden}, bf16) * 0.02;
    for (const char* norm : {"norm1.", "norm2."}) {
      params[p + norm + "weight"] = at::ones({hidden}, bf16);
      params[p + norm + "bias"] = at::zeros({hidden}, bf16);
    }
  }
  VisionBlocks blocks(cfg, params);
  // The int8 copies as the vision int8 cache holds them (groups of 128).
  std::vector<kernels::QuantizedMatrix> quantized;
  quantized.reserve(params.size());
  Int8Weights int8;
  for (const auto& [name, w] : params) {
    if (w.dim() != 2) continue;
    quantized.push_back(kernels::quantize_int8(
        kernels::Bf16Matrix{static_cast<const uint16_t*>(w.contiguous().data_ptr()), w.size(0), w.size(1)},
        kDefaultInt8GroupSize));
    int8[name] = quantized.back().view();
  }
  VisionBlocks blocks_int8(cfg, params, &int8);
  // int8 linears with the float scores of bf16 vision (as before int8 scores).
  VisionBlocks blocks_int8_float_scores(cfg, params, &int8);
  blocks_int8_float_scores.attention_scores = kernels::AttentionScores::Float;
  if (argc > 6)
    blocks.query_chunk = blocks_int8.query_chunk = blocks_int8_float_scores.query_chunk = std::atoll(argv[6]);
  const VisionPositions pos = vision_positions(cfg, {grid});
  const at::Tensor x = at::randn({n, hidden}, bf16);

  std::vector<at::Tensor> taps;
  const double whole = best_of(reps, [&] {
    taps.clear();
    blocks.run(x, pos, &taps);
  });
  const double whole_cpu = g_cpu;
  const long whole_faults = g_faults;
  // bf16, int8 and int8 with float scores whole blocks alternately, one run
  // each per round.
  double pair_bf16 = 1e30, pair_int8 = 1e30, pair_bf16_cpu = 1e30, pair_int8_cpu = 1e30;
  double pair_int8_float = 1e30, pair_int8_float_cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    pair_bf16 = std::min(pair_bf16, best_of(1, [&] {
      taps.clear();
      blocks.run(x, pos, &taps);
    }));
    pair_bf16_cpu = std::min(pair_bf16_cpu, g_cpu);
    pair_int8 = std::min(pair_int8, best_of(1, [&] {
      taps.clear();
      blocks_int8.run(x, pos, &taps);
    }));
    pair_int8_cpu = std::min(pair_int8_cpu, g_cpu);
    pair_int8_float = std::min(pair_int8_float, best_of(1, [&] {
      taps.clear();
      blocks_int8_float_scores.run(x, pos, &taps);
    }));
    pair_int8_float_cpu = std::min(pair_int8_float_cpu, g_cpu);
  }

  // The 96 linears, each on an input of its own shape.
  const at::Tensor xh = at::randn({n, hidden}, bf16), xi = at::randn({n, inner}, bf16);
  auto linears = [&](const std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>& lin) {
    return best_of(reps, [&] {
      for (int64_t i = 0; i < cfg.depth; ++i) {
        const std::string p = fmt::format("blocks.{}.", i);
        lin(xh, params[p + "attn.qkv.weight"], params[p + "attn.qkv.bias"]);
        lin(xh, params[p + "attn.proj.weight"], params[p + "attn.proj.bias"]);
        lin(xh, params[p + "mlp.linear_fc1.weight"], params[p + "mlp.linear_fc1.bias"]);
        lin(xi, params[p + "mlp.linear_fc2.weight"], params[p + "mlp.linear_fc2.bias"]);
      }
    });
  };
  const double qvl_linears = linears([](const at::Tensor& a, const at::Tensor& w, const at::Tensor& b) {
    return tensor::linear(a, w, b);
  });
  const double qvl_linears_cpu = g_cpu;
  const double aten_linears = linears([](const at::Tensor& a, const at::Tensor& w, const at::Tensor& b) {
    return at::linear(a, w, b);
  });
  const double aten_linears_cpu = g_cpu;
  const double int8_linears = best_of(reps, [&] {
    for (int64_t i = 0; i < cfg.depth; ++i) {
      const std::string p = fmt::format("blocks.{}.", i);
      for (const char* l : {"attn.qkv.", "attn.proj.", "mlp.linear_fc1.", "mlp.linear_fc2."}) {
        const std::string w = p + l + "weight";
        vision_linear(std::string(l) == "mlp.linear_fc2." ? xi : xh, tensor::LinearWeight(int8.at(w)),
                      params[p + l + "bias"]);
      }
    }
  });
  const double int8_linears_cpu = g_cpu;

  // Attention's two matmuls per head and query block, as vision_blocks.cpp does them.
  const int64_t heads = cfg.num_heads, head_dim = hidden / heads;
  const at::Tensor q = at::randn({heads, n, head_dim}, bf16), k = at::randn({heads, n, head_dim}, bf16);
  const double attention_mm = best_of(reps, [&] {
    for (int64_t i = 0; i < cfg.depth; ++i) {
      at::Tensor scores = tensor::matmul(q, k.transpose(1, 2));
      at::Tensor out = tensor::matmul(scores, k);
    }
  });
  const double attention_cpu = g_cpu;
  // The fused kernel as vision_blocks.cpp runs it: blocks of 512 queries of
  // one head, split across the threads (kernels::parallel_for: this file is
  // not built with -fopenmp, so at::parallel_for here would run serially).
  const at::Tensor v = at::randn({heads, n, head_dim}, bf16), fused_out = at::empty({n, heads, head_dim}, bf16);
  const int64_t chunk = blocks.query_chunk, chunks = (n + chunk - 1) / chunk;
  auto fused = [&](kernels::AttentionScores scores) {
    const kernels::AttentionTensors tensors{q.data_ptr(), k.data_ptr(), v.data_ptr(), fused_out.data_ptr(),
                                            n, heads, head_dim, scores};
    return best_of(reps, [&] {
      for (int64_t i = 0; i < cfg.depth; ++i)
        kernels::parallel_for(heads * chunks, 1, [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t q0 = (t % chunks) * chunk;
            kernels::attend_block(kernels::Storage::BF16, tensors, {t / chunks, 0, n, q0, std::min(chunk, n - q0)},
                                  1.0f / 8);
          }
        });
    });
  };
  const double attention_fused = fused(kernels::AttentionScores::Float);
  const double attention_fused_cpu = g_cpu;
  const double attention_int8 = fused(kernels::AttentionScores::Int8);
  const double attention_int8_cpu = g_cpu;
  at::Tensor ln_out = at::empty_like(xh), g = xi.clone();
  std::vector<float> ones(size_t(hidden), 1.f), zeros(size_t(hidden), 0.f);
  const double between = best_of(reps, [&] {
    for (int64_t i = 0; i < cfg.depth; ++i) {
      for (int j = 0; j < 2; ++j)
        kernels::add_layer_norm(kernels::Storage::BF16, const_cast<void*>(xh.data_ptr()), nullptr, ln_out.data_ptr(),
                                ones.data(), zeros.data(), n, hidden, 1e-6f);
      kernels::gelu_tanh(kernels::Storage::BF16, g.data_ptr(), g.numel());
    }
  });
  const double between_cpu = g_cpu;

  const double linear_flops = 2.0 * double(n) * double(hidden) * double(cfg.depth) * double(3 * hidden + hidden + 2 * inner);
  const double attention_flops = 4.0 * double(n) * double(n) * double(hidden) * double(cfg.depth);
  fmt::print("vision blocks, {} patches ({}x{}), {} blocks, bf16, {} threads, min of {}, query chunk {}\n", n, grid.h,
             grid.w, cfg.depth, at::get_num_threads(), reps, blocks.query_chunk);
  fmt::print("                                      wall s   CPU s  GFLOP/s (wall)\n");
  fmt::print("  whole blocks (VisionBlocks::run)   {:7.3f} {:7.3f}  {:6.1f} on linears+attention\n", whole, whole_cpu,
             (linear_flops + attention_flops) / whole / 1e9);
  fmt::print("  minor page faults in one run of the whole blocks: {}\n", whole_faults);
  fmt::print("  96 linears, tensor::linear         {:7.3f} {:7.3f}  {:6.1f}\n", qvl_linears, qvl_linears_cpu,
             linear_flops / qvl_linears / 1e9);
  fmt::print("  96 linears, at::linear             {:7.3f} {:7.3f}  {:6.1f}\n", aten_linears, aten_linears_cpu,
             linear_flops / aten_linears / 1e9);
  fmt::print("  attention matmuls (whole heads)    {:7.3f} {:7.3f}  {:6.1f}\n", attention_mm, attention_cpu,
             attention_flops / attention_mm / 1e9);
  fmt::print("  attention, fused (kernels/attention.h) {:5.3f} {:7.3f}  {:6.1f}\n", attention_fused,
             attention_fused_cpu, attention_flops / attention_fused / 1e9);
  fmt::print("  attention, fused, int8 scores      {:7.3f} {:7.3f}  {:6.1f}\n", attention_int8, attention_int8_cpu,
             attention_flops / attention_int8 / 1e9);
  fmt::print("  layer norms + GELU                 {:7.3f} {:7.3f}\n", between, between_cpu);
  fmt::print("  96 linears, int8 GEMM              {:7.3f} {:7.3f}  {:6.1f}\n", int8_linears, int8_linears_cpu,
             linear_flops / int8_linears / 1e9);
  fmt::print("  whole blocks, alternating: bf16    {:7.3f} {:7.3f}\n", pair_bf16, pair_bf16_cpu);
  fmt::print("  whole blocks, alternating: int8    {:7.3f} {:7.3f}   bf16/int8 {:.2f} wall, {:.2f} CPU\n", pair_int8,
             pair_int8_cpu, pair_bf16 / pair_int8, pair_bf16_cpu / pair_int8_cpu);
  fmt::print("  ... int8 linears, float scores     {:7.3f} {:7.3f}   bf16/that {:.2f} wall, {:.2f} CPU\n",
             pair_int8_float, pair_int8_float_cpu, pair_bf16 / pair_int8_float, pair_bf16_cpu / pair_int8_float_cpu);
  return 0;
}
