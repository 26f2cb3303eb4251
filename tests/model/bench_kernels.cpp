// Decode-step speed of the GEMV kernels on the Qwen3-VL-2B decoder shapes
// (random weights: speed does not depend on values). Every layer gets its own
// weights so each step streams ~3.4 GB (bf16) from memory, as decoding does.
//
//   qvl_bench_kernels [repetitions=5] [filter]
//
// filter: a substring of the labels printed, e.g. "bf16", "int8 group 128", "int4",
// "batch 8", "2 threads", "avx2". Every CPU tier this machine can run is
// measured (kernels/cpu.h; QVL_ISA does not limit it), with the avx512 tier's
// dot-product (dpbf16, for bf16-valued x) and VNNI kernels where the CPU has
// them. Configurations of one kind and thread count run
// interleaved. Prints, per configuration, the minimum over repetitions of
// each shape's time summed over the 28 layers, and the whole step as
// tokens/s and GB/s of weights streamed (a batch of vectors shares one pass
// over the weights, so "tokens/s" there is steps/s: multiply by the batch).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qvl/kernels/cpu.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/quant.h"
#include "qvl/kernels/quant4.h"

using namespace qvl::kernels;

namespace {

struct Projection {
  const char* name;
  int64_t out, in;
  int count;  // matrices of this shape per decode step
};
constexpr int kLayers = 28;
const std::vector<Projection> kProjections = {
    {"q 2048->2048", 2048, 2048, kLayers},     {"k 2048->1024", 1024, 2048, kLayers},
    {"v 2048->1024", 1024, 2048, kLayers},     {"o 2048->2048", 2048, 2048, kLayers},
    {"gate 2048->6144", 6144, 2048, kLayers},  {"up 2048->6144", 6144, 2048, kLayers},
    {"down 6144->2048", 2048, 6144, kLayers},  {"lm_head 2048->151936", 151936, 2048, 1},
};

// One matrix of one projection: bytes streamed and how to run it once.
struct Gemv {
  size_t shape;  // index into kProjections
  double bytes;
  std::function<void()> run;
};

struct Result {
  std::vector<double> seconds_per_shape;  // min over repetitions of the per-step sum
  double step_seconds = 1e30;             // min over repetitions
  double step_bytes = 0;
};

// The configurations of one comparison, measured interleaved (one step of
// each in turn, `repetitions` times) so a change in machine load hits all alike.
std::vector<Result> measure(const std::vector<const std::vector<Gemv>*>& steps, int repetitions) {
  std::vector<Result> results(steps.size());
  for (size_t c = 0; c < steps.size(); ++c) {
    results[c].seconds_per_shape.assign(kProjections.size(), 1e30);
    for (const Gemv& g : *steps[c]) results[c].step_bytes += g.bytes;
  }
  for (int rep = 0; rep < repetitions; ++rep)
    for (size_t c = 0; c < steps.size(); ++c) {
      Result& result = results[c];
      std::vector<double> per_shape(kProjections.size(), 0.0);
      const auto step_start = std::chrono::steady_clock::now();
      for (const Gemv& g : *steps[c]) {
        const auto start = std::chrono::steady_clock::now();
        g.run();
        per_shape[g.shape] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      result.step_seconds = std::min(result.step_seconds, total);
      for (size_t i = 0; i < per_shape.size(); ++i)
        result.seconds_per_shape[i] = std::min(result.seconds_per_shape[i], per_shape[i]);
    }
  return results;
}

void print(const std::string& label, const Result& r, const std::vector<Gemv>& step) {
  std::vector<double> bytes(kProjections.size(), 0.0);
  for (const Gemv& g : step) bytes[g.shape] += g.bytes;
  fmt::print("\n== {}\n", label);
  for (size_t i = 0; i < kProjections.size(); ++i)
    fmt::print("  {:<22} {:8.2f} ms  {:6.1f} GB/s\n", kProjections[i].name, r.seconds_per_shape[i] * 1e3,
               bytes[i] / r.seconds_per_shape[i] / 1e9);
  fmt::print("  {:<22} {:8.2f} ms  {:6.1f} GB/s  -> {:.2f} tokens/s\n", "decode step", r.step_seconds * 1e3,
             r.step_bytes / r.step_seconds / 1e9, 1.0 / r.step_seconds);
}

// Fast, value-independent fill: small bf16 values from a xorshift stream.
void fill_random_bf16(uint16_t* data, int64_t count, uint64_t seed) {
  at::parallel_for(0, count, 1 << 20, [&](int64_t begin, int64_t end) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + uint64_t(begin) + 1;
    for (int64_t i = begin; i < end; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      data[i] = float_to_bf16((int64_t(s % 2001) - 1000) * 1e-4f);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const std::string filter = argc > 2 ? argv[2] : "";
  // '|' separates alternatives: "int8 group 128 avx2 batch 1,|int4 group 64 avx2 batch 1,".
  const auto wanted = [&](const std::string& label) {
    if (filter.empty()) return true;
    for (size_t begin = 0;;) {
      const size_t end = filter.find('|', begin);
      if (label.find(filter.substr(begin, end - begin)) != std::string::npos) return true;
      if (end == std::string::npos) return false;
      begin = end + 1;
    }
  };
  fmt::print("kernels: {}  ATen threads: {}\n", isa_description(), at::get_num_threads());
  std::vector<Isa> tiers;  // fastest first
  for (Isa isa : {Isa::Avx512, Isa::Avx2Vnni, Isa::Avx2, Isa::Neon, Isa::Generic})
    if (isa_supported(isa)) tiers.push_back(isa);
  const bool has_dpbf16 = isa_supported(Isa::Avx512) && cpu_features().avx512_bf16;
  const bool has_vnni = isa_supported(Isa::Avx512) && cpu_features().avx512_vnni;

  // The weights of one decode step, in bf16, one matrix per layer and projection.
  struct Matrix {
    size_t shape;
    at::Tensor w;
  };
  std::vector<Matrix> matrices;
  for (size_t i = 0; i < kProjections.size(); ++i)
    for (int c = 0; c < kProjections[i].count; ++c) {
      at::Tensor w = at::empty({kProjections[i].out, kProjections[i].in}, at::kBFloat16);
      fill_random_bf16(reinterpret_cast<uint16_t*>(w.data_ptr<at::BFloat16>()), w.numel(), matrices.size());
      matrices.push_back({i, w});
    }
  const auto view = [](const at::Tensor& w) {
    return Bf16Matrix{reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()), w.size(0), w.size(1)};
  };
  // Inputs and outputs for every width and batch (tiny next to the weights).
  const std::vector<int64_t> batches = {1, 2, 4, kMaxBatch, 2 * kMaxBatch, kMaxVectors};
  // x_bf16: x in bf16 for at::linear; x_rounded: the same values as floats,
  // for the dpbf16 kernel, whose callers promise bf16 values.
  std::map<std::pair<int64_t, int64_t>, at::Tensor> x_float, x_bf16, x_rounded, y_float;  // by (batch, width)
  for (const Projection& p : kProjections)
    for (int64_t batch : batches) {
      x_float[{batch, p.in}] = at::randn({batch, p.in});
      x_bf16[{batch, p.in}] = x_float[{batch, p.in}].to(at::kBFloat16);
      x_rounded[{batch, p.in}] = x_bf16[{batch, p.in}].to(at::kFloat);
      y_float[{batch, p.out}] = at::empty({batch, p.out});
    }
  const auto x_of = [&](int64_t batch, int64_t in) { return x_float[{batch, in}].data_ptr<float>(); };
  const auto x_rounded_of = [&](int64_t batch, int64_t in) { return x_rounded[{batch, in}].data_ptr<float>(); };
  const auto y_of = [&](int64_t batch, int64_t out) { return y_float[{batch, out}].data_ptr<float>(); };

  // Runs the wanted ones of `configs` interleaved and prints each.
  using Config = std::pair<std::string, std::vector<Gemv>>;
  const auto compare = [&](int threads, const std::vector<Config>& configs) {
    std::vector<std::string> labels;
    std::vector<const std::vector<Gemv>*> steps;
    for (const auto& [label, step] : configs) {
      const std::string full = fmt::format("{}, {} thread{}", label, threads, threads > 1 ? "s" : "");
      if (!wanted(full)) continue;
      labels.push_back(full);
      steps.push_back(&step);
    }
    if (steps.empty()) return;
    at::set_num_threads(threads);
    measure(steps, 1);  // warm up: page in, start the thread pool
    const std::vector<Result> results = measure(steps, repetitions);
    for (size_t c = 0; c < steps.size(); ++c) print(labels[c], results[c], *steps[c]);
  };

  for (int threads : {1, 2}) {
    std::vector<Config> configs;
    for (int64_t batch : batches) {
      const std::string b = fmt::format(" batch {}", batch);
      std::vector<Gemv> aten;
      for (const Matrix& m : matrices) {
        const Projection& p = kProjections[m.shape];
        aten.push_back({m.shape, double(m.w.numel()) * 2,
                        [&, w = m.w, batch, in = p.in] { (void)at::linear(x_bf16[{batch, in}], w); }});
      }
      configs.emplace_back("at::linear bf16" + b, std::move(aten));
      // One configuration per tier, plus avx512's dot-product kernel.
      const auto add_tier = [&](const std::string& name, Isa isa, bool x_is_bf16) {
        std::vector<Gemv> step;
        for (const Matrix& m : matrices) {
          const Projection& p = kProjections[m.shape];
          step.push_back({m.shape, double(m.w.numel()) * 2, [&, w = view(m.w), batch, in = p.in, out = p.out, isa,
                                                             x_is_bf16] {
                            const float* x = x_is_bf16 ? x_rounded_of(batch, in) : x_of(batch, in);
                            gemv_bf16(w, x, y_of(batch, out), batch, isa, x_is_bf16);
                          }});
        }
        configs.emplace_back("qvl bf16 " + name + b, std::move(step));
      };
      for (Isa isa : tiers) {
        if (isa == Isa::Avx2Vnni) continue;  // its bf16 kernels are avx2's
        add_tier(isa == Isa::Avx512 ? "avx512-fma" : isa_name(isa), isa, false);
        if (isa == Isa::Avx512 && has_dpbf16) add_tier("avx512-dpbf16", isa, true);
      }
    }
    compare(threads, configs);
  }

  // The int8 kernel each tier runs: avx512 means VNNI where the CPU has it.
  const auto int8_kernel_name = [&](Isa isa) -> std::string {
    if (isa == Isa::Avx512) return has_vnni ? "avx512-vnni" : "avx512 (avx2 kernel)";
    return isa_name(isa);
  };
  for (int64_t group : {int64_t(64), int64_t(128), kGroupPerRow}) {
    const std::string group_name = group == kGroupPerRow ? "per-row" : "group " + std::to_string(group);
    const std::string prefix = "qvl int8 " + group_name;
    bool any = false;
    for (Isa isa : tiers)
      for (int64_t batch : batches)
        for (int threads : {1, 2})
          for (const char* route : {"", "gemm "})
            any = any || wanted(fmt::format("{} {}{} batch {}, {} thread{}", prefix, route, int8_kernel_name(isa),
                                            batch, threads, threads > 1 ? "s" : ""));
    if (!any) continue;
    at::set_num_threads(2);
    std::vector<QuantizedMatrix> quantized;
    quantized.reserve(matrices.size());
    for (const Matrix& m : matrices) quantized.push_back(quantize_int8(view(m.w), group));
    for (int threads : {1, 2}) {
      std::vector<Config> configs;
      // One step over every projection, `multiply(w, batch, in, out, isa)` for each.
      auto add_config = [&](const std::string& label, int64_t batch, Isa isa, auto multiply) {
        std::vector<Gemv> step;
        for (size_t i = 0; i < matrices.size(); ++i) {
          const Projection& p = kProjections[matrices[i].shape];
          const Int8Matrix& w = quantized[i].view();
          step.push_back({matrices[i].shape, double(w.weight_bytes() + w.scale_bytes()),
                          [=] { multiply(w, batch, p.in, p.out, isa); }});
        }
        configs.emplace_back(label, std::move(step));
      };
      for (int64_t batch : batches)
        for (Isa isa : tiers) {
          add_config(fmt::format("{} {} batch {}", prefix, int8_kernel_name(isa), batch), batch, isa,
                     [&](const Int8Matrix& w, int64_t b, int64_t in, int64_t out, Isa t) {
                       gemv_int8(w, x_of(b, in), y_of(b, out), b, t);
                     });
          // The int8 GEMM that longer inputs take (tensor::linear_into), over the same streamed weights.
          if (gemm_int8_is_fast(isa))
            add_config(fmt::format("{} gemm {} batch {}", prefix, int8_kernel_name(isa), batch), batch, isa,
                       [&](const Int8Matrix& w, int64_t b, int64_t in, int64_t out, Isa t) {
                         gemm_int8(w, x_of(b, in), Storage::F32, in, b, y_of(b, out), Storage::F32, out, nullptr, t);
                       });
        }
      compare(threads, configs);
    }
  }
  // The 4-bit kernel, the same way (quantizing the 2B shapes takes a while).
  {
    const std::string prefix = "qvl int4 group 64";
    bool any = false;
    for (Isa isa : tiers)
      for (int64_t batch : batches)
        for (int threads : {1, 2})
          for (const char* route : {"", "gemm "})
            any = any || wanted(fmt::format("{} {}{} batch {}, {} thread{}", prefix, route, int8_kernel_name(isa),
                                            batch, threads, threads > 1 ? "s" : ""));
    if (any) {
      at::set_num_threads(2);
      std::vector<QuantizedInt4Matrix> quantized;
      quantized.reserve(matrices.size());
      for (const Matrix& m : matrices) quantized.push_back(quantize_int4(view(m.w)));
      for (int threads : {1, 2}) {
        std::vector<Config> configs;
        // One step over every projection, `multiply(w, batch, in, out, isa)` for each.
        auto add_config = [&](const std::string& label, int64_t batch, Isa isa, auto multiply) {
          std::vector<Gemv> step;
          for (size_t i = 0; i < matrices.size(); ++i) {
            const Projection& p = kProjections[matrices[i].shape];
            const Int4Matrix& w = quantized[i].view();
            step.push_back({matrices[i].shape, double(w.level_bytes() + w.param_bytes()),
                            [=] { multiply(w, batch, p.in, p.out, isa); }});
          }
          configs.emplace_back(label, std::move(step));
        };
        for (int64_t batch : batches)
          for (Isa isa : tiers) {
            add_config(fmt::format("{} {} batch {}", prefix, int8_kernel_name(isa), batch), batch, isa,
                       [&](const Int4Matrix& w, int64_t b, int64_t in, int64_t out, Isa t) {
                         gemv_int4(w, x_of(b, in), y_of(b, out), b, t);
                       });
            // The int4 GEMM that longer inputs take (tensor::linear_into), over the same streamed weights.
            if (gemm_int4_is_fast(isa))
              add_config(fmt::format("{} gemm {} batch {}", prefix, int8_kernel_name(isa), batch), batch, isa,
                         [&](const Int4Matrix& w, int64_t b, int64_t in, int64_t out, Isa t) {
                           gemm_int4(w, x_of(b, in), Storage::F32, in, b, y_of(b, out), Storage::F32, out, nullptr, t);
                         });
          }
        compare(threads, configs);
      }
    }
  }
  return 0;
}
