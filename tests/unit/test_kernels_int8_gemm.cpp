// The int8 GEMM (kernels/int8_gemm.h) against a scalar integer reference
// computed here, on every CPU tier this machine can run, and against the
// exact product of the unquantized inputs within the quantization's bound.
// No torch: these run in the sanitizer stage too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/error.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/quant.h"

using namespace qvl;
using namespace qvl::kernels;
using qvl::test::normal_values;
using qvl::test::same_bits;
using qvl::test::supported_tiers;
using qvl::test::to_bf16;

namespace {

struct GemmShape {
  int64_t rows, out, in, group;  // group: kGroupPerRow or a multiple of 64
};
// M = 1, tails of the 6-row tiles and 32-column panels, K not a multiple of 4,
// 64 or the group, one group per row, and the model's K.
const std::vector<GemmShape> kGemmShapes = {
    {1, 1, 1, 64},      {1, 37, 67, 64},     {7, 33, 130, 128},  {13, 64, 128, 128}, {6, 32, 256, kGroupPerRow},
    {5, 31, 333, 192},  {50, 100, 2048, 128}, {37, 65, 6144, 128}, {64, 96, 200, kGroupPerRow}};

struct GemmProblem {
  GemmShape shape;
  std::vector<uint16_t> w;  // [out, in] bf16
  std::vector<float> x;     // [rows, in]
  QuantizedMatrix q;
  GemmProblem(const GemmShape& s, uint64_t seed)
      : shape(s),
        w(to_bf16(normal_values(s.out * s.in, seed, 0.05f))),
        x(normal_values(s.rows * s.in, seed + 1)),
        q(quantize_int8(Bf16Matrix{w.data(), s.out, s.in}, s.group)) {
    // An outlier column, as real activations have: its group's scale is large.
    for (int64_t m = 0; m < s.rows; ++m) x[size_t(m * s.in + (m * 7) % s.in)] *= 20.0f;
  }
};

// What gemm_int8 promises, computed independently: each row of x quantized
// per group (scale max|x| / 127, round half to even), the integer dot
// product of each group in int64, the groups summed in float64.
std::vector<double> integer_reference(const GemmProblem& p) {
  const Int8Matrix& w = p.q.view();
  const int64_t groups = w.groups();
  std::vector<double> y(size_t(p.shape.rows * w.rows));
  std::vector<int64_t> xq(size_t(w.padded_cols));
  std::vector<float> xs(static_cast<size_t>(groups));
  for (int64_t m = 0; m < p.shape.rows; ++m) {
    std::fill(xq.begin(), xq.end(), 0);
    for (int64_t g = 0; g < groups; ++g) {
      float max_abs = 0.0f;
      for (int64_t k = g * w.group_size; k < std::min(w.cols, (g + 1) * w.group_size); ++k)
        max_abs = std::max(max_abs, std::fabs(p.x[size_t(m * w.cols + k)]));
      xs[size_t(g)] = max_abs / 127.0f;
      if (max_abs == 0.0f) continue;
      for (int64_t k = g * w.group_size; k < std::min(w.cols, (g + 1) * w.group_size); ++k)
        xq[size_t(k)] = int64_t(std::nearbyint(p.x[size_t(m * w.cols + k)] / xs[size_t(g)]));
    }
    for (int64_t n = 0; n < w.rows; ++n) {
      double total = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t dot = 0;
        for (int64_t k = g * w.group_size; k < (g + 1) * w.group_size; ++k)
          dot += xq[size_t(k)] * int64_t(w.weights[n * w.padded_cols + k]);
        total += double(dot) * double(w.scales[n * groups + g]) * double(xs[size_t(g)]);
      }
      y[size_t(m * w.rows + n)] = total;
    }
  }
  return y;
}

std::vector<float> run_gemm(const GemmProblem& p, Isa isa) {
  std::vector<float> y(size_t(p.shape.rows * p.shape.out), -1.0f);
  gemm_int8(p.q.view(), p.x.data(), Storage::F32, p.shape.in, p.shape.rows, y.data(), Storage::F32, p.shape.out, nullptr, isa);
  return y;
}

// Largest |y - reference| / (1 + |reference|).
double worst_relative(const std::vector<float>& y, const std::vector<double>& reference) {
  double worst = 0.0;
  for (size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, std::fabs(double(y[i]) - reference[i]) / (1.0 + std::fabs(reference[i])));
  return worst;
}

}  // namespace

TEST_CASE("gemm_int8: the integer reference on every tier and edge shape") {
  for (Isa isa : supported_tiers()) {
    for (const GemmShape& s : kGemmShapes) {
      CAPTURE(isa_name(isa));
      CAPTURE(s.rows);
      CAPTURE(s.out);
      CAPTURE(s.in);
      CAPTURE(s.group);
      const GemmProblem p(s, uint64_t(s.rows * 1000 + s.out * 10 + s.in));
      const std::vector<double> reference = integer_reference(p);
      // The groups' float products rounded once each and summed in float32:
      // a few float32 epsilons (1.2e-7) times the number of groups.
      const double tolerance = 4e-7 * double(p.q.view().groups() + 4);
      CHECK(worst_relative(run_gemm(p, isa), reference) <= tolerance);
    }
  }
}

TEST_CASE("gemm_int8: the x86 tiers give the same bits") {
  // Exact integer group sums and the same float accumulation: the avx2
  // kernel (vpmaddubsw) and the avx512 one (vpdpbusd where the CPU has VNNI)
  // promise each other's results.
  std::vector<Isa> tiers;
  for (Isa isa : supported_tiers())
    if (qvl::test::is_simd_x86(isa)) tiers.push_back(isa);
  if (tiers.size() < 2) return;
  for (const GemmShape& s : kGemmShapes) {
    CAPTURE(s.rows);
    CAPTURE(s.out);
    CAPTURE(s.in);
    const GemmProblem p(s, uint64_t(s.rows * 31 + s.out * 7 + s.in));
    const std::vector<float> first = run_gemm(p, tiers[0]);
    for (size_t t = 1; t < tiers.size(); ++t) {
      CAPTURE(isa_name(tiers[t]));
      CHECK(same_bits(run_gemm(p, tiers[t]), first));
    }
  }
}

TEST_CASE("gemm_int8: within the quantization bound of the exact product of the unquantized inputs") {
  // |x·w − xq·sx · q·sw| per element <= |x|·sw/2 + |w|·sx/2 + sx·sw/4, summed
  // over k (each rounding moves a value by at most half its scale).
  const GemmShape s{9, 70, 300, 128};
  const GemmProblem p(s, 7);
  const Int8Matrix& w = p.q.view();
  const std::vector<float> y = run_gemm(p, active_isa());
  for (int64_t m = 0; m < s.rows; ++m)
    for (int64_t n = 0; n < s.out; ++n) {
      double exact = 0.0, bound = 1e-5;
      for (int64_t g = 0; g < w.groups(); ++g) {
        float max_abs = 0.0f;
        for (int64_t k = g * w.group_size; k < std::min(s.in, (g + 1) * w.group_size); ++k)
          max_abs = std::max(max_abs, std::fabs(p.x[size_t(m * s.in + k)]));
        const double sx = max_abs / 127.0, sw = w.scales[n * w.groups() + g];
        for (int64_t k = g * w.group_size; k < std::min(s.in, (g + 1) * w.group_size); ++k) {
          const double xv = p.x[size_t(m * s.in + k)], wv = bf16_to_float(p.w[size_t(n * s.in + k)]);
          exact += xv * wv;
          bound += std::fabs(xv) * sw / 2 + std::fabs(wv) * sx / 2 + sx * sw / 4;
        }
      }
      CAPTURE(m);
      CAPTURE(n);
      CHECK(std::fabs(double(y[size_t(m * s.out + n)]) - exact) <= bound);
    }
}

TEST_CASE("gemm_int8: bf16 in and out, strides, threads") {
  const GemmShape s{23, 70, 200, 64};
  const GemmProblem p(s, 11);
  for (Isa isa : supported_tiers()) {
    CAPTURE(isa_name(isa));
    const std::vector<float> y = run_gemm(p, isa);
    // bf16 output: the float result rounded to nearest even.
    std::vector<uint16_t> y_bf16(y.size()), expected(y.size());
    gemm_int8(p.q.view(), p.x.data(), Storage::F32, s.in, s.rows, y_bf16.data(), Storage::BF16, s.out, nullptr, isa);
    for (size_t i = 0; i < y.size(); ++i) expected[i] = float_to_bf16(y[i]);
    CHECK(same_bits(y_bf16, expected));

    // bf16 input: the same as float input holding the bf16 values.
    const std::vector<uint16_t> x_bf16 = to_bf16(p.x);
    GemmProblem rounded(s, 11);
    for (size_t i = 0; i < x_bf16.size(); ++i) rounded.x[i] = bf16_to_float(x_bf16[i]);
    std::vector<float> from_bf16(y.size());
    gemm_int8(p.q.view(), x_bf16.data(), Storage::BF16, s.in, s.rows, from_bf16.data(), Storage::F32, s.out, nullptr, isa);
    CHECK(same_bits(from_bf16, run_gemm(rounded, isa)));

    const auto gemm = [&](const float* x, int64_t x_stride, float* out, int64_t y_stride) {
      gemm_int8(p.q.view(), x, Storage::F32, x_stride, s.rows, out, Storage::F32, y_stride, nullptr, isa);
    };
    qvl::test::check_strides_and_threads(s.rows, s.in, s.out, p.x, y, gemm);
  }
}

TEST_CASE("gemm_int8: a bias is added to each float sum before its one rounding") {
  // With a bias, each output is the float32 sum without it plus bias[n],
  // rounded once: in float32 the same bits as adding it afterwards, in bf16
  // the rounding of that float (adding it to an already rounded bf16 output
  // would round twice, and differs on some outputs). Every tier, every column
  // tail of the panels and tiles.
  for (Isa isa : supported_tiers()) {
    for (const GemmShape& s : kGemmShapes) {
      CAPTURE(isa_name(isa));
      CAPTURE(s.rows);
      CAPTURE(s.out);
      CAPTURE(s.in);
      const GemmProblem p(s, uint64_t(s.rows * 77 + s.out * 5 + s.in));
      const std::vector<float> bias = normal_values(s.out, uint64_t(s.out + 3), 3.0f);
      const std::vector<float> plain = run_gemm(p, isa);
      std::vector<float> with_bias(plain.size(), -1.0f), expected(plain.size());
      std::vector<uint16_t> with_bias_bf16(plain.size()), expected_bf16(plain.size());
      gemm_int8(p.q.view(), p.x.data(), Storage::F32, s.in, s.rows, with_bias.data(), Storage::F32, s.out,
                bias.data(), isa);
      gemm_int8(p.q.view(), p.x.data(), Storage::F32, s.in, s.rows, with_bias_bf16.data(), Storage::BF16, s.out,
                bias.data(), isa);
      for (int64_t m = 0; m < s.rows; ++m)
        for (int64_t n = 0; n < s.out; ++n) {
          const size_t i = size_t(m * s.out + n);
          expected[i] = plain[i] + bias[size_t(n)];
          expected_bf16[i] = float_to_bf16(expected[i]);
        }
      CHECK(same_bits(with_bias, expected));
      CHECK(same_bits(with_bias_bf16, expected_bf16));
    }
  }
}

TEST_CASE("gemm_int8: rejects bad arguments") {
  const GemmProblem p({4, 8, 64, 64}, 3);
  std::vector<float> y(32);
  CHECK_THROWS_AS(gemm_int8(p.q.view(), p.x.data(), Storage::F32, 63, 4, y.data(), Storage::F32, 8), Error);
  CHECK_THROWS_AS(gemm_int8(p.q.view(), p.x.data(), Storage::F32, 64, 4, y.data(), Storage::F32, 7), Error);
  CHECK_THROWS_AS(gemm_int8(p.q.view(), p.x.data(), Storage::F32, 64, -1, y.data(), Storage::F32, 8), Error);
  Int8Matrix broken = p.q.view();
  broken.group_size = 48;
  CHECK_THROWS_AS(gemm_int8(broken, p.x.data(), Storage::F32, 64, 4, y.data(), Storage::F32, 8), Error);
  // No rows: nothing to do, nothing written.
  gemm_int8(p.q.view(), p.x.data(), Storage::F32, 64, 0, y.data(), Storage::F32, 8);
}
