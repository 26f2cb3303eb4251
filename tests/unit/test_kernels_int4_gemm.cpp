// The GEMM over 4-bit weights (kernels/int8_gemm.h, gemm_int4) against a
// scalar reference computed here from the matrix's levels, scales and
// offsets, on every CPU tier this machine can run; against the exact product
// of x and the dequantized weights within x's quantization bound; and its
// bf16, stride, bias and thread behaviour. No torch: these run in the
// sanitizer stage too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/error.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/quant4.h"

using namespace qvl;
using namespace qvl::kernels;
using qvl::test::normal_values;
using qvl::test::same_bits;
using qvl::test::supported_tiers;
using qvl::test::to_bf16;

namespace {

struct Int4Shape {
  int64_t rows, out, in;
};
// M = 1, tails of the row tiles and 32-column panels, K not a multiple of 4,
// 64 or 128, and the model's K.
const std::vector<Int4Shape> kInt4Shapes = {{1, 1, 1},     {1, 37, 67},   {7, 33, 130},   {13, 64, 128},
                                            {5, 31, 333},  {50, 100, 2048}, {37, 65, 6144}, {9, 96, 200}};

// Gaussian weights, the first row shifted away from zero so that its offsets
// (mins) are far from its levels' share.
std::vector<uint16_t> weights(const Int4Shape& s, uint64_t seed) {
  std::vector<float> w = normal_values(s.out * s.in, seed, 0.05f);
  for (int64_t k = 0; k < s.in; ++k) w[size_t(k)] += 0.3f;
  return to_bf16(w);
}

struct Int4Problem {
  Int4Shape shape;
  std::vector<uint16_t> w;  // [out, in] bf16
  std::vector<float> x;     // [rows, in]
  QuantizedInt4Matrix q;
  Int4Problem(const Int4Shape& s, uint64_t seed)
      : shape(s),
        w(weights(s, seed)),
        x(normal_values(s.rows * s.in, seed + 1)),
        q(quantize_int4(Bf16Matrix{w.data(), s.out, s.in})) {
    // An outlier column, as real activations have: its group's scale is large.
    for (int64_t m = 0; m < s.rows; ++m) x[size_t(m * s.in + (m * 7) % s.in)] *= 20.0f;
  }
};

// What gemm_int4 promises, computed independently in float64: each row of x
// quantized per group of 64 (scale max|x| / 127, round half to even), and per
// group u·scale·Σ u·xq·x_scale + min·x_scale·Σ xq. `magnitude` gets the sum
// of the terms' absolute values, the scale of float32's rounding errors.
std::vector<double> reference(const Int4Problem& p, std::vector<double>& magnitude) {
  const Int4Matrix& w = p.q.view();
  const int64_t groups = w.groups(), rows = p.shape.rows;
  std::vector<double> y(size_t(rows * w.rows));
  magnitude.assign(y.size(), 0.0);
  std::vector<int64_t> xq(size_t(w.padded_cols));
  std::vector<double> xs(static_cast<size_t>(groups));
  for (int64_t m = 0; m < rows; ++m) {
    std::fill(xq.begin(), xq.end(), 0);
    for (int64_t g = 0; g < groups; ++g) {
      float max_abs = 0.0f;
      for (int64_t k = g * 64; k < std::min(w.cols, (g + 1) * 64); ++k)
        max_abs = std::max(max_abs, std::fabs(p.x[size_t(m * w.cols + k)]));
      const float scale = max_abs / 127.0f;
      xs[size_t(g)] = scale;
      if (max_abs == 0.0f) continue;
      for (int64_t k = g * 64; k < std::min(w.cols, (g + 1) * 64); ++k)
        xq[size_t(k)] = int64_t(std::nearbyint(p.x[size_t(m * w.cols + k)] / scale));
    }
    for (int64_t n = 0; n < w.rows; ++n) {
      double total = 0.0, size = 0.0;
      for (int64_t g = 0; g < groups; ++g) {
        int64_t dot = 0, sum = 0;
        for (int64_t k = g * 64; k < (g + 1) * 64; ++k) {
          dot += xq[size_t(k)] * int64_t(int4_level(w, n, k));
          sum += xq[size_t(k)];
        }
        const double scale = f16_to_float(w.params[(n * groups + g) * 2]);
        const double min = f16_to_float(w.params[(n * groups + g) * 2 + 1]);
        const double a = double(dot) * scale * xs[size_t(g)], b = min * xs[size_t(g)] * double(sum);
        total += a + b;
        size += std::fabs(a) + std::fabs(b);
      }
      y[size_t(m * w.rows + n)] = total;
      magnitude[size_t(m * w.rows + n)] = size;
    }
  }
  return y;
}

std::vector<float> run_gemm(const Int4Problem& p, Isa isa) {
  std::vector<float> y(size_t(p.shape.rows * p.shape.out), -1.0f);
  gemm_int4(p.q.view(), p.x.data(), Storage::F32, p.shape.in, p.shape.rows, y.data(), Storage::F32, p.shape.out,
            nullptr, isa);
  return y;
}

}  // namespace

TEST_CASE("gemm_int4: the reference on every tier and edge shape") {
  for (Isa isa : supported_tiers()) {
    for (const Int4Shape& s : kInt4Shapes) {
      CAPTURE(isa_name(isa));
      CAPTURE(s.rows);
      CAPTURE(s.out);
      CAPTURE(s.in);
      const Int4Problem p(s, uint64_t(s.rows * 1000 + s.out * 10 + s.in));
      std::vector<double> magnitude;
      const std::vector<double> expected = reference(p, magnitude);
      const std::vector<float> y = run_gemm(p, isa);
      // Two float products and sums per group, each rounded once in float32
      // (1.2e-7 of the terms' size), the offsets' products among them.
      const double per_term = 4e-7 * double(2 * p.q.view().groups() + 4);
      double worst = 0.0;
      for (size_t i = 0; i < y.size(); ++i)
        worst = std::max(worst, std::fabs(double(y[i]) - expected[i]) / (1e-6 + magnitude[i]));
      CHECK(worst <= per_term);
    }
  }
}

TEST_CASE("gemm_int4: the x86 tiers give the same bits") {
  std::vector<Isa> tiers;
  for (Isa isa : supported_tiers())
    if (qvl::test::is_simd_x86(isa)) tiers.push_back(isa);
  if (tiers.size() < 2) return;
  for (const Int4Shape& s : kInt4Shapes) {
    CAPTURE(s.rows);
    CAPTURE(s.out);
    CAPTURE(s.in);
    const Int4Problem p(s, uint64_t(s.rows * 31 + s.out * 7 + s.in));
    const std::vector<float> first = run_gemm(p, tiers[0]);
    for (size_t t = 1; t < tiers.size(); ++t) {
      CAPTURE(isa_name(tiers[t]));
      CHECK(same_bits(run_gemm(p, tiers[t]), first));
    }
  }
}

TEST_CASE("gemm_int4: within x's quantization bound of the product with the dequantized weights") {
  // The weights enter exactly (u · scale + min, as dequantize_int4_rows makes
  // them); only x is rounded, each value by at most half its group's scale:
  // |y − Σ x·w| <= Σ |w|·sx/2, plus float32 rounding.
  const Int4Shape s{9, 70, 300};
  const Int4Problem p(s, 7);
  const Int4Matrix& w = p.q.view();
  std::vector<float> dense(size_t(s.out * s.in));
  dequantize_int4_rows(w, 0, s.out, Storage::F32, dense.data());
  for (Isa isa : supported_tiers()) {
    CAPTURE(isa_name(isa));
    const std::vector<float> y = run_gemm(p, isa);
    int wrong = 0;
    for (int64_t m = 0; m < s.rows; ++m)
      for (int64_t n = 0; n < s.out; ++n) {
        double exact = 0.0, bound = 1e-4;
        for (int64_t g = 0; g * 64 < s.in; ++g) {
          float max_abs = 0.0f;
          for (int64_t k = g * 64; k < std::min(s.in, (g + 1) * 64); ++k)
            max_abs = std::max(max_abs, std::fabs(p.x[size_t(m * s.in + k)]));
          for (int64_t k = g * 64; k < std::min(s.in, (g + 1) * 64); ++k) {
            const double wv = dense[size_t(n * s.in + k)];
            exact += double(p.x[size_t(m * s.in + k)]) * wv;
            bound += std::fabs(wv) * max_abs / 127.0 / 2;
          }
        }
        wrong += std::fabs(double(y[size_t(m * s.out + n)]) - exact) > bound;
      }
    CHECK(wrong == 0);
  }
}

TEST_CASE("gemm_int4: bf16 in and out, strides, a bias, threads") {
  const Int4Shape s{23, 70, 200};
  const Int4Problem p(s, 11);
  const std::vector<float> bias = normal_values(s.out, 5, 3.0f);
  for (Isa isa : supported_tiers()) {
    CAPTURE(isa_name(isa));
    const std::vector<float> y = run_gemm(p, isa);
    // bf16 output: the float result rounded to nearest even; with a bias,
    // the float sum plus bias[n] rounded once.
    std::vector<uint16_t> y_bf16(y.size()), expected(y.size()), biased_bf16(y.size()), expected_biased(y.size());
    std::vector<float> biased(y.size()), expected_biased_f32(y.size());
    gemm_int4(p.q.view(), p.x.data(), Storage::F32, s.in, s.rows, y_bf16.data(), Storage::BF16, s.out, nullptr, isa);
    gemm_int4(p.q.view(), p.x.data(), Storage::F32, s.in, s.rows, biased.data(), Storage::F32, s.out, bias.data(), isa);
    gemm_int4(p.q.view(), p.x.data(), Storage::F32, s.in, s.rows, biased_bf16.data(), Storage::BF16, s.out,
              bias.data(), isa);
    for (size_t i = 0; i < y.size(); ++i) {
      expected[i] = float_to_bf16(y[i]);
      expected_biased_f32[i] = y[i] + bias[i % size_t(s.out)];
      expected_biased[i] = float_to_bf16(expected_biased_f32[i]);
    }
    CHECK(same_bits(y_bf16, expected));
    CHECK(same_bits(biased, expected_biased_f32));
    CHECK(same_bits(biased_bf16, expected_biased));

    // bf16 input: the same as float input holding the bf16 values.
    const std::vector<uint16_t> x_bf16 = to_bf16(p.x);
    Int4Problem rounded(s, 11);
    for (size_t i = 0; i < x_bf16.size(); ++i) rounded.x[i] = bf16_to_float(x_bf16[i]);
    std::vector<float> from_bf16(y.size());
    gemm_int4(p.q.view(), x_bf16.data(), Storage::BF16, s.in, s.rows, from_bf16.data(), Storage::F32, s.out, nullptr,
              isa);
    CHECK(same_bits(from_bf16, run_gemm(rounded, isa)));

    const auto gemm = [&](const float* x, int64_t x_stride, float* out, int64_t y_stride) {
      gemm_int4(p.q.view(), x, Storage::F32, x_stride, s.rows, out, Storage::F32, y_stride, nullptr, isa);
    };
    qvl::test::check_strides_and_threads(s.rows, s.in, s.out, p.x, y, gemm);
  }
}

TEST_CASE("gemm_int4: rejects bad arguments") {
  const Int4Problem p({4, 8, 64}, 3);
  std::vector<float> y(32);
  CHECK_THROWS_AS(gemm_int4(p.q.view(), p.x.data(), Storage::F32, 63, 4, y.data(), Storage::F32, 8), Error);
  CHECK_THROWS_AS(gemm_int4(p.q.view(), p.x.data(), Storage::F32, 64, 4, y.data(), Storage::F32, 7), Error);
  CHECK_THROWS_AS(gemm_int4(p.q.view(), p.x.data(), Storage::F32, 64, -1, y.data(), Storage::F32, 8), Error);
  Int4Matrix broken = p.q.view();
  broken.padded_cols = 96;
  CHECK_THROWS_AS(gemm_int4(broken, p.x.data(), Storage::F32, 64, 4, y.data(), Storage::F32, 8), Error);
  gemm_int4(p.q.view(), p.x.data(), Storage::F32, 64, 0, y.data(), Storage::F32, 8);  // no rows: nothing to do
}
