#include "qvl/tensor/gemm_probe.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // NoGradGuard: ATen.h stopped bringing it in libtorch 2.x

#include <algorithm>
#include <chrono>

#include "qvl/error.h"
#include "qvl/tensor/linear.h"

namespace qvl::tensor {
namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

kernels::ThroughputProbe measure_bf16_gemm(int64_t m, int64_t k, int64_t n, double min_seconds) {
  if (m < 1 || k < 1 || n < 1) throw Error("measure_bf16_gemm: the sizes must be positive");
  at::NoGradGuard no_grad;
  at::manual_seed(1234);
  const at::Tensor x = at::randn({m, k}).to(at::kBFloat16);
  const at::Tensor w = (at::randn({n, k}) * 0.02).to(at::kBFloat16);
  at::Tensor out = at::empty({m, n}, x.options());
  linear_into(out, x, w);  // warm-up: oneDNN builds its kernel, threads start
  kernels::ThroughputProbe probe;
  probe.rows = n;
  probe.cols = k;
  probe.batch = m;
  double best = 1e30;
  const double start = now_s();
  while (probe.calls < 3 || now_s() - start < min_seconds) {
    const double t0 = now_s();
    linear_into(out, x, w);
    best = std::min(best, now_s() - t0);
    ++probe.calls;
  }
  probe.gops_per_s = 2.0 * double(m) * double(k) * double(n) / best / 1e9;
  return probe;
}

}  // namespace qvl::tensor
