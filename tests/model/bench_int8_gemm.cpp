// Prefill matmul routes on the Qwen3-VL-2B decoder shapes, interleaved in one
// run (random weights and inputs: speed does not depend on values):
//   bf16     at::mm on bf16 (oneDNN on the avx512 tier): today's bf16 prefill
//   deq+bf16 int8 weights dequantized to bf16 per block, then at::mm: today's
//            int8 prefill (tensor::linear_into)
//   int8     qvl's int8 × int8 GEMM (kernels/int8_gemm.h), bf16 in and out
//   onednn   libtorch's quantized::linear_dynamic on the onednn engine
//            (weights int8 per channel, activations u8 per tensor)
//   f32      at::mm on float32 (OpenBLAS): what the avx2 tier's bf16 prefill
//            runs (tensor::linear_into widens bf16 weights block by block);
//            for that tier run with QVL_ISA=avx2 OPENBLAS_CORETYPE=Haswell and
//            skip the bf16 route (oneDNN has no bf16 matmul for AVX2 alone)
// Prints per shape the min over repetitions (ms, GOP/s = 2·M·N·K per second)
// and each route's relative error ‖y − y_f32‖ / ‖y_f32‖ against a float32
// GEMM of the same (unquantized) inputs.
//
//   qvl_bench_int8_gemm [repetitions=5] [rows=512] [threads=2] [route,route...]
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // NoGradGuard: ATen.h stopped bringing it in libtorch 2.x
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "qvl/kernels/cpu.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/quant.h"
#include "qvl/tensor/dequant.h"

using namespace qvl;

namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};
const std::vector<Shape> kShapes = {{"q/o 2048x2048", 2048, 2048},
                                    {"k/v 1024x2048", 1024, 2048},
                                    {"gate/up 6144x2048", 6144, 2048},
                                    {"down 2048x6144", 2048, 6144}};

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double relative_error(const at::Tensor& y, const at::Tensor& reference) {
  return (y.to(at::kFloat) - reference).norm().item<double>() / reference.norm().item<double>();
}

// quantized::linear_prepack / linear_dynamic through the dispatcher (their
// packed-parameter class has no public header in Debian's libtorch).
struct OnednnLinear {
  c10::IValue packed;
  c10::OperatorHandle dynamic;
  explicit OnednnLinear(const at::Tensor& w_float)
      : dynamic(c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_dynamic", "")) {
    const at::Tensor scales = w_float.abs().amax(1).div(127.0).clamp_min(1e-12).to(at::kDouble);
    const at::Tensor zeros = at::zeros({w_float.size(0)}, at::kLong);
    const at::Tensor q = at::quantize_per_channel(w_float, scales, zeros, 0, at::kQInt8);
    auto prepack = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_prepack", "");
    std::vector<c10::IValue> stack{q, c10::IValue()};
    prepack.callBoxed(&stack);
    packed = stack.at(0);
  }
  at::Tensor operator()(const at::Tensor& x) const {
    std::vector<c10::IValue> stack{x, packed, false};
    dynamic.callBoxed(&stack);
    return stack.at(0).toTensor();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int repetitions = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const int64_t rows = argc > 2 ? std::max(1, std::atoi(argv[2])) : 512;
  const int threads = argc > 3 ? std::max(1, std::atoi(argv[3])) : 2;
  const std::string only = argc > 4 ? argv[4] : "";  // run only the routes of these names (comma-separated)
  const auto selected = [&](const char* route) {
    return only.empty() || ("," + only + ",").find("," + std::string(route) + ",") != std::string::npos;
  };
  at::set_num_threads(threads);  // as qvl does (session/threads.cpp): libtorch's default may be 1
  at::NoGradGuard no_grad;
  bool have_onednn = false;
  for (at::QEngine e : at::globalContext().supportedQEngines()) have_onednn |= e == at::kONEDNN;
  if (have_onednn) at::globalContext().setQEngine(at::kONEDNN);
  fmt::print("kernels: {}  ATen threads: {}  rows: {}  int8 GEMM kernel of its own: {}  onednn qengine: {}\n",
             kernels::isa_description(), at::get_num_threads(), rows, kernels::gemm_int8_is_fast(), have_onednn);
  const char* routes[] = {"bf16", "deq+bf16", "int8", "onednn", "f32"};
  constexpr int kRoutes = 5;
  for (const Shape& s : kShapes) {
    at::manual_seed(1);
    const at::Tensor w_bf16 = (at::randn({s.out, s.in}) * 0.02).to(at::kBFloat16);
    const at::Tensor w_float = w_bf16.to(at::kFloat);
    const at::Tensor x_bf16 = at::randn({rows, s.in}).to(at::kBFloat16);
    const at::Tensor x_float = x_bf16.to(at::kFloat);
    const at::Tensor reference = at::mm(x_float, w_float.t());
    const kernels::QuantizedMatrix q = kernels::quantize_int8(
        kernels::Bf16Matrix{reinterpret_cast<const uint16_t*>(w_bf16.data_ptr()), s.out, s.in}, 128);
    std::unique_ptr<OnednnLinear> onednn;
    if (have_onednn) onednn = std::make_unique<OnednnLinear>(w_float);
    at::Tensor out[kRoutes];
    for (at::Tensor& o : out) o = at::empty({rows, s.out}, at::kBFloat16);
    out[4] = at::empty({rows, s.out}, at::kFloat);
    at::Tensor scratch;
    std::function<void()> run[kRoutes] = {
        [&] { at::mm_out(out[0], x_bf16, w_bf16.t()); },
        [&] {
          // What tensor::linear_into did before the int8 GEMM: one block here.
          if (!scratch.defined()) scratch = at::empty({s.out, s.in}, at::kBFloat16);
          tensor::dequantize_rows_into(q.view(), 0, scratch);
          at::mm_out(out[1], x_bf16, scratch.t());
        },
        [&] {
          kernels::gemm_int8(q.view(), x_bf16.data_ptr(), kernels::Storage::BF16, s.in, rows, out[2].data_ptr(),
                             kernels::Storage::BF16, s.out);
        },
        [&] {
          if (onednn) out[3] = (*onednn)(x_float);
        },
        [&] { at::mm_out(out[4], x_float, w_float.t()); },
    };
    double best[kRoutes];
    std::fill(best, best + kRoutes, 1e30);
    for (int rep = 0; rep < repetitions; ++rep)
      for (int r = 0; r < kRoutes; ++r)
        if (selected(routes[r])) best[r] = std::min(best[r], seconds_of(run[r]));
    const double ops = 2.0 * double(rows) * double(s.out) * double(s.in);
    fmt::print("\n== {} (M={} N={} K={})\n", s.name, rows, s.out, s.in);
    for (int r = 0; r < kRoutes; ++r) {
      if ((r == 3 && !onednn) || !selected(routes[r])) continue;
      fmt::print("  {:<9} {:8.2f} ms  {:7.1f} GOP/s  rel. error vs f32 {:.2e}\n", routes[r], best[r] * 1e3,
                 ops / best[r] / 1e9, relative_error(out[r], reference));
    }
  }
  return 0;
}
