// The decode GEMV kernels (kernels/gemv.h, kernels/quant.h) against float64
// references computed here, on every CPU tier this machine can run
// (kernels/cpu.h). No torch: these run in the sanitizer stage too.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/error.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/int8_cache.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/quant.h"

using namespace qvl;
using namespace qvl::kernels;
using qvl::test::is_simd_x86;
using qvl::test::same_bits;
using qvl::test::supported_tiers;
using qvl::test::ThreadCount;

namespace {

struct Shape {
  int64_t rows, cols;
};
// Odd sizes (not multiples of 16/32/64) and the real model's K.
const std::vector<Shape> kShapes = {{1, 1},   {3, 7},    {17, 33},   {37, 100}, {64, 31},  {129, 65},
                                    {5, 129}, {33, 2048}, {7, 6144}, {250, 2048}, {96, 6144}};

struct Problem {
  int64_t rows = 0, cols = 0, batch = 0;
  std::vector<uint16_t> w;  // [rows, cols] bf16
  std::vector<float> x;     // [batch, cols]
  Bf16Matrix view() const { return {w.data(), rows, cols}; }
  // The same weights with other vectors.
  Problem with_x(std::vector<float> other, int64_t other_batch) const {
    Problem p = *this;
    p.x = std::move(other);
    p.batch = other_batch;
    return p;
  }
  // Vector n alone.
  Problem row(int64_t n) const {
    return with_x(std::vector<float>(x.begin() + n * cols, x.begin() + (n + 1) * cols), 1);
  }
  // The first `n` vectors.
  Problem first(int64_t n) const { return with_x(std::vector<float>(x.begin(), x.begin() + n * cols), n); }
};

Problem make_problem(Shape s, int64_t batch, uint64_t seed) {
  Problem p;
  p.rows = s.rows;
  p.cols = s.cols;
  p.batch = batch;
  p.w = test::to_bf16(test::normal_values(s.rows * s.cols, seed));
  p.x = test::normal_values(batch * s.cols, seed + 0x9e3779b97f4a7c15ull);
  return p;
}

// x already bf16 values, for the dot-product kernel.
Problem with_bf16_x(const Problem& p) {
  std::vector<float> x = p.x;
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  return p.with_x(std::move(x), p.batch);
}

std::vector<float> run_bf16(const Problem& p, Isa isa, bool x_is_bf16 = false) {
  std::vector<float> y(size_t(p.batch * p.rows));
  gemv_bf16(p.view(), p.x.data(), y.data(), p.batch, isa, x_is_bf16);
  return y;
}

std::vector<float> run_int8(const Int8Matrix& w, const std::vector<float>& x, int64_t batch, Isa isa) {
  std::vector<float> y(size_t(batch * w.rows));
  gemv_int8(w, x.data(), y.data(), batch, isa);
  return y;
}

// Whether gemv_bf16(x_is_bf16 = true) runs the dot-product kernel on `isa`.
bool runs_dot_kernel(Isa isa) { return isa == Isa::Avx512 && cpu_features().avx512_bf16; }

// A dense float64 matrix [rows, cols].
struct Dense64 {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double at(int64_t r, int64_t k) const { return v[size_t(r * cols + k)]; }
};

Dense64 widened(const Problem& p) {
  Dense64 d{p.rows, p.cols, std::vector<double>(p.w.size())};
  for (size_t i = 0; i < p.w.size(); ++i) d.v[i] = bf16_to_float(p.w[i]);
  return d;
}

// The int8 matrix's values, straight from its fields.
Dense64 dequantized64(const Int8Matrix& m) {
  Dense64 d{m.rows, m.cols, std::vector<double>(size_t(m.rows * m.cols))};
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t k = 0; k < m.cols; ++k)
      d.v[size_t(r * m.cols + k)] =
          double(m.weights[r * m.padded_cols + k]) * double(m.scales[r * m.groups() + k / m.group_size]);
  return d;
}

// max |y - W·x| relative to sum_k |w_k x_k|, the scale rounding errors grow with.
double scaled_error(const std::vector<float>& y, const Dense64& w, const std::vector<float>& x, int64_t batch) {
  double worst = 0;
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < w.cols; ++k) {
        sum += w.at(r, k) * double(x[size_t(n * w.cols + k)]);
        magnitude += std::fabs(w.at(r, k) * double(x[size_t(n * w.cols + k)]));
      }
      worst = std::max(worst, std::fabs(double(y[size_t(n * w.rows + r)]) - sum) / std::max(magnitude, 1e-300));
    }
  return worst;
}

// What rounding x to int8 per group may cost: each x_k moves by at most its
// group's max|x| / 254, so y moves by at most sum_k |w_k| · that; plus a few
// float32 ulps of the accumulation.
bool within_int8_error(const std::vector<float>& y, const Int8Matrix& m, const std::vector<float>& x, int64_t batch) {
  const Dense64 w = dequantized64(m);
  for (int64_t n = 0; n < batch; ++n) {
    const float* xn = x.data() + n * m.cols;
    std::vector<double> step(size_t(m.cols));
    for (int64_t g = 0; g < m.groups(); ++g) {
      const int64_t first = g * m.group_size, last = std::min(first + m.group_size, m.cols);
      double max_abs = 0;
      for (int64_t k = first; k < last; ++k) max_abs = std::max(max_abs, std::fabs(double(xn[k])));
      for (int64_t k = first; k < last; ++k) step[size_t(k)] = max_abs / 254.0;
    }
    for (int64_t r = 0; r < m.rows; ++r) {
      double sum = 0, moved = 0, magnitude = 0;
      for (int64_t k = 0; k < m.cols; ++k) {
        sum += w.at(r, k) * xn[k];
        moved += step[size_t(k)] * std::fabs(w.at(r, k));
        magnitude += std::fabs(w.at(r, k) * xn[k]);
      }
      if (std::fabs(double(y[size_t(n * m.rows + r)]) - sum) > moved * (1 + 1e-4) + 1e-6 * magnitude) return false;
    }
  }
  return true;
}

const std::vector<int64_t> kGroupSizes = {64, 128, 256, kGroupPerRow};

}  // namespace

TEST_CASE("bf16 round trip") {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 3.0e38f, 1.5e-30f}) {
    const uint16_t bits = float_to_bf16(v);
    CHECK(bf16_to_float(bits) == doctest::Approx(v).epsilon(1.0 / 256));
    CHECK(float_to_bf16(bf16_to_float(bits)) == bits);
  }
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // Ties go to even (as ATen rounds): 1 + 2^-8 lies halfway between bf16 1.0
  // (0x3f80) and 1 + 2^-7 (0x3f81); 1 + 3·2^-8 halfway between 0x3f81 and 0x3f82.
  CHECK(float_to_bf16(1.00390625f) == 0x3f80);
  CHECK(float_to_bf16(1.01171875f) == 0x3f82);
  CHECK(float_to_bf16(-1.00390625f) == 0xbf80);
  // Just above a tie rounds up.
  CHECK(float_to_bf16(1.00390625f + std::ldexp(1.0f, -20)) == 0x3f81);
}

TEST_CASE("bf16 gemv matches the float64 reference on odd and real shapes, on every tier") {
  for (const Shape s : kShapes) {
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const Problem p = make_problem(s, 1, 1000 + s.rows * 7 + s.cols);
    const Problem p_bf16 = with_bf16_x(p);
    const Dense64 w64 = widened(p);
    std::vector<float> simd_result;
    for (Isa isa : supported_tiers()) {
      CAPTURE(isa_name(isa));
      const std::vector<float> y = run_bf16(p, isa);
      // float32 accumulation of bf16·f32 products: a few float32 ulps (the
      // portable code also rounds each product where it cannot fuse).
      CHECK(scaled_error(y, w64, p.x, 1) < 2e-6);
      if (is_simd_x86(isa)) {
        // avx2 and avx512 give the same bits.
        if (!simd_result.empty()) CHECK(same_bits(y, simd_result));
        simd_result = y;
      }
      const std::vector<float> y_dot = run_bf16(p_bf16, isa, /*x_is_bf16=*/true);
      if (runs_dot_kernel(isa)) {
        CHECK(scaled_error(y_dot, w64, p_bf16.x, 1) < 1e-5);
      } else {
        // Elsewhere the promise changes nothing.
        CHECK(same_bits(y_dot, run_bf16(p_bf16, isa)));
      }
    }
    if (isa_supported(Isa::Neon)) CHECK(same_bits(run_bf16(p, Isa::Neon), run_bf16(p, Isa::Generic)));
  }
}

TEST_CASE("bf16 gemv: a batch gives each vector's own result, on any thread count, on every tier") {
  // Above kMaxBatch the vectors go in groups over tiles of rows (24 rows of 2048 columns).
  std::vector<int64_t> batches;
  for (int64_t batch = 1; batch <= kMaxBatch; ++batch) batches.push_back(batch);
  for (int64_t batch : {kMaxBatch + 1, int64_t(15), 2 * kMaxBatch + 1, kMaxVectors}) batches.push_back(batch);
  for (const Shape s : {Shape{37, 100}, Shape{70, 2048}, Shape{9, 6144}, Shape{13, 33}}) {
    for (int64_t batch : batches) {
      CAPTURE(s.cols);
      CAPTURE(batch);
      const Problem p = make_problem(s, batch, 77 + batch);
      const Problem p_bf16 = with_bf16_x(p);
      for (Isa isa : supported_tiers()) {
        for (bool x_is_bf16 : {false, true}) {
          CAPTURE(isa_name(isa));
          CAPTURE(x_is_bf16);
          const Problem& problem = x_is_bf16 ? p_bf16 : p;
          const std::vector<float> together = run_bf16(problem, isa, x_is_bf16);
          for (int64_t n = 0; n < batch; ++n) {
            const std::vector<float> alone = run_bf16(problem.row(n), isa, x_is_bf16);
            CHECK(same_bits(alone, std::vector<float>(together.begin() + n * s.rows,
                                                      together.begin() + (n + 1) * s.rows)));
          }
        }
      }
    }
  }
  // Rows not a multiple of any row block, and pieces per thread that split blocks.
  for (int64_t batch : {int64_t(1), int64_t(3), int64_t(4), kMaxBatch, int64_t(15), kMaxVectors}) {
    CAPTURE(batch);
    const Problem big = make_problem({1003, 2048}, batch, 5);
    const Problem big_bf16 = with_bf16_x(big);
    std::vector<float> simd_result;
    for (Isa isa : supported_tiers()) {
      for (bool x_is_bf16 : {false, true}) {
        CAPTURE(isa_name(isa));
        CAPTURE(x_is_bf16);
        const Problem& problem = x_is_bf16 ? big_bf16 : big;
        std::vector<float> one_thread, two_threads;
        {
          ThreadCount t(1);
          one_thread = run_bf16(problem, isa, x_is_bf16);
        }
        {
          ThreadCount t(2);
          two_threads = run_bf16(problem, isa, x_is_bf16);
        }
        CHECK(same_bits(one_thread, two_threads));
        if (is_simd_x86(isa) && !x_is_bf16) {
          if (!simd_result.empty()) CHECK(same_bits(one_thread, simd_result));
          simd_result = one_thread;
        }
      }
    }
  }
}

TEST_CASE("bf16 gemv rejects a bad batch and a tier this CPU cannot run") {
  const Problem p = make_problem({4, 8}, 1, 1);
  float y[4 * 9];
  std::vector<float> x(8 * 9, 0.0f);
  CHECK_THROWS_AS(gemv_bf16(p.view(), x.data(), y, 0), Error);
  CHECK_THROWS_AS(gemv_bf16(p.view(), x.data(), y, kMaxVectors + 1), Error);
  int unsupported = 0;
  for (Isa isa : test::kAllTiers) {
    if (isa_supported(isa)) continue;
    CAPTURE(isa_name(isa));
    ++unsupported;
    CHECK_THROWS_WITH_AS(gemv_bf16(p.view(), x.data(), y, 1, isa), doctest::Contains(isa_name(isa)), Error);
    CHECK_THROWS_WITH_AS(gemv_bf16(p.view(), x.data(), y, 1, isa, true), doctest::Contains(isa_name(isa)), Error);
  }
  CHECK(unsupported >= 1);  // neon and the x86 tiers never meet on one CPU
}

TEST_CASE("int8 quantize: scales and the dequantization error bound") {
  for (const Shape s : {Shape{5, 7}, Shape{19, 100}, Shape{8, 2048}, Shape{3, 6144}}) {
    for (int64_t group : kGroupSizes) {
      CAPTURE(s.cols);
      CAPTURE(group);
      const Problem p = make_problem(s, 1, 9 + s.cols);
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      const Int8Matrix& m = q.view();
      CHECK(m.rows == s.rows);
      CHECK(m.cols == s.cols);
      CHECK(m.padded_cols % 64 == 0);
      CHECK(m.padded_cols >= s.cols);
      const int64_t expected_group = group == kGroupPerRow ? m.padded_cols : group;
      CHECK(m.group_size == expected_group);

      const Dense64 w = widened(p), deq = dequantized64(m);
      bool scales_right = true, within_bound = true;
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t g = 0; g < m.groups(); ++g) {
          const int64_t first = g * m.group_size, last = std::min(first + m.group_size, s.cols);
          double group_max = 0;
          for (int64_t k = first; k < last; ++k) group_max = std::max(group_max, std::fabs(w.at(r, k)));
          const double scale = m.scales[r * m.groups() + g];
          scales_right &= std::fabs(scale - group_max / 127.0) <= 1e-6 * group_max / 127.0;
          for (int64_t k = first; k < last; ++k)
            within_bound &= std::fabs(deq.at(r, k) - w.at(r, k)) <= group_max / 254.0 * (1 + 1e-5);
        }
      CHECK(scales_right);
      CHECK(within_bound);
      // The library's dequantize agrees with the fields, in float32 and bf16.
      std::vector<float> out(size_t(s.rows * s.cols));
      dequantize_rows(m, 0, s.rows, Storage::F32, out.data());
      std::vector<uint16_t> out_bf16(size_t(s.rows * s.cols));
      dequantize_rows(m, 0, s.rows, Storage::BF16, out_bf16.data());
      bool agrees = true;
      for (size_t i = 0; i < out.size(); ++i) {
        agrees &= std::fabs(double(out[i]) - deq.v[i]) <= 1e-7 * std::fabs(deq.v[i]);
        agrees &= out_bf16[i] == float_to_bf16(out[i]);
      }
      CHECK(agrees);
      // Padding stays zero, so kernels may read it.
      bool padding_zero = true, in_range = true;
      for (int64_t r = 0; r < s.rows; ++r)
        for (int64_t k = 0; k < m.padded_cols; ++k) {
          const int8_t v = m.weights[r * m.padded_cols + k];
          if (k >= s.cols) padding_zero &= v == 0;
          in_range &= v >= -127;
        }
      CHECK(padding_zero);
      CHECK(in_range);
    }
  }
  // An all-zero group quantizes to zero with a zero scale.
  const std::vector<uint16_t> zeros(2 * 70, 0);
  const QuantizedMatrix q = quantize_int8({zeros.data(), 2, 70}, 64);
  std::vector<float> out(2 * 70, 1.0f);
  dequantize_rows(q.view(), 0, 2, Storage::F32, out.data());
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("int8 dequantize_rows: a range of rows, and rows outside the matrix refused") {
  const Problem p = make_problem({70, 200}, 1, 31);
  const QuantizedMatrix q = quantize_int8(p.view(), 128);
  std::vector<float> all(70 * 200), some(9 * 200);
  dequantize_rows(q.view(), 0, 70, Storage::F32, all.data());
  dequantize_rows(q.view(), 61, 9, Storage::F32, some.data());
  CHECK(std::equal(some.begin(), some.end(), all.begin() + 61 * 200));
  CHECK_THROWS_AS(dequantize_rows(q.view(), 61, 10, Storage::F32, some.data()), Error);
  CHECK_THROWS_AS(dequantize_rows(q.view(), -1, 1, Storage::F32, some.data()), Error);
}

TEST_CASE("int8 gemv: within its x rounding error on odd and real shapes, on every tier") {
  for (const Shape s : kShapes) {
    for (int64_t group : kGroupSizes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(group);
      const Problem p = make_problem(s, 1, 300 + s.cols + group);
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      const Int8Matrix& m = q.view();
      std::vector<float> simd_result;
      for (Isa isa : supported_tiers()) {
        CAPTURE(isa_name(isa));
        const std::vector<float> y = run_int8(m, p.x, 1, isa);
        CHECK(within_int8_error(y, m, p.x, 1));
        if (is_simd_x86(isa)) {
          // The avx2 kernel's integer dot products are the VNNI kernel's.
          if (!simd_result.empty()) CHECK(same_bits(y, simd_result));
          simd_result = y;
        }
      }
      if (isa_supported(Isa::Neon))
        CHECK(same_bits(run_int8(m, p.x, 1, Isa::Neon), run_int8(m, p.x, 1, Isa::Generic)));
    }
  }
}

TEST_CASE("int8 gemv: a batch gives each vector's own result, on every tier") {
  // 101 rows of 2048 columns: above kMaxBatch, groups of vectors over tiles of 48 rows.
  const int64_t rows = 101;
  const Problem p = make_problem({rows, 2048}, kMaxVectors, 4);
  const QuantizedMatrix q = quantize_int8(p.view(), 128);
  std::vector<int64_t> batches;
  for (int64_t batch = 1; batch <= kMaxBatch; ++batch) batches.push_back(batch);
  for (int64_t batch : {kMaxBatch + 1, int64_t(15), 2 * kMaxBatch + 1, kMaxVectors}) batches.push_back(batch);
  for (Isa isa : supported_tiers()) {
    for (int64_t batch : batches) {
      CAPTURE(isa_name(isa));
      CAPTURE(batch);
      const Problem x = p.first(batch);
      const std::vector<float> together = run_int8(q.view(), x.x, batch, isa);
      CHECK(within_int8_error(together, q.view(), x.x, batch));
      for (int64_t n = 0; n < batch; ++n)
        CHECK(same_bits(run_int8(q.view(), x.row(n).x, 1, isa),
                        std::vector<float>(together.begin() + n * rows, together.begin() + (n + 1) * rows)));
    }
  }
}

TEST_CASE("int8 gemv: batches 1..8 on odd shapes, avx2 = avx512 bits, any thread count") {
  // Rows not a multiple of any row block, pieces per thread that split blocks.
  for (const Shape s : {Shape{1, 5}, Shape{13, 100}, Shape{61, 2048}, Shape{1003, 640}}) {
    for (int64_t group : {int64_t(64), int64_t(128), kGroupPerRow}) {
      const Problem p = make_problem(s, kMaxBatch, 40 + s.rows + group);
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      for (int64_t batch = 1; batch <= kMaxBatch; ++batch) {
        CAPTURE(s.rows);
        CAPTURE(s.cols);
        CAPTURE(group);
        CAPTURE(batch);
        const std::vector<float> x = p.first(batch).x;
        std::vector<float> simd_result;
        for (Isa isa : supported_tiers()) {
          CAPTURE(isa_name(isa));
          std::vector<float> one_thread, two_threads;
          {
            ThreadCount t(1);
            one_thread = run_int8(q.view(), x, batch, isa);
          }
          {
            ThreadCount t(2);
            two_threads = run_int8(q.view(), x, batch, isa);
          }
          CHECK(same_bits(one_thread, two_threads));
          CHECK(within_int8_error(one_thread, q.view(), x, batch));
          if (is_simd_x86(isa)) {
            if (!simd_result.empty()) CHECK(same_bits(one_thread, simd_result));
            simd_result = one_thread;
          }
        }
      }
    }
  }
}

TEST_CASE("int8 gemv: extreme values, where vpdpbusd sees x+128 = 1 or 255 and vpmaddubsw its largest pairs") {
  // Every weight at ±127 and every x at ± its group maximum: the largest
  // products and sums the integer code meets on one 6144-wide row.
  const int64_t rows = 9, cols = 6144;
  std::mt19937 rng(21);
  Problem p;
  p.rows = rows;
  p.cols = cols;
  p.batch = 2;
  for (int64_t i = 0; i < rows * cols; ++i) p.w.push_back(float_to_bf16(rng() % 2 ? 1.0f : -1.0f));
  for (int64_t i = 0; i < 2 * cols; ++i) p.x.push_back(rng() % 2 ? 3.0f : -3.0f);
  for (int64_t group : {int64_t(64), kGroupPerRow}) {
    CAPTURE(group);
    const QuantizedMatrix q = quantize_int8(p.view(), group);
    // Exactly representable: q = ±127, x = ±127 levels, the sum is an integer
    // times the scales, so every tier must agree with the float64 product.
    const Dense64 w = widened(p);
    std::vector<float> simd_result;
    for (Isa isa : supported_tiers()) {
      CAPTURE(isa_name(isa));
      const std::vector<float> y = run_int8(q.view(), p.x, 2, isa);
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t r = 0; r < rows; ++r) {
          double expected = 0;
          for (int64_t k = 0; k < cols; ++k) expected += w.at(r, k) * p.x[size_t(n * cols + k)];
          CHECK(std::fabs(y[size_t(n * rows + r)] - expected) <= 1e-3 + 1e-6 * std::fabs(expected));
        }
      if (is_simd_x86(isa)) {
        if (!simd_result.empty()) CHECK(same_bits(y, simd_result));
        simd_result = y;
      }
    }
  }
}

TEST_CASE("int8 gemv rejects a bad batch and a tier this CPU cannot run") {
  const Problem p = make_problem({4, 70}, 1, 1);
  const QuantizedMatrix q = quantize_int8(p.view(), 64);
  float y[4 * 9];
  std::vector<float> x(70 * 9, 0.0f);
  CHECK_THROWS_AS(gemv_int8(q.view(), x.data(), y, 0), Error);
  CHECK_THROWS_AS(gemv_int8(q.view(), x.data(), y, kMaxVectors + 1), Error);
  for (Isa isa : test::kAllTiers) {
    if (isa_supported(isa)) continue;
    CAPTURE(isa_name(isa));
    CHECK_THROWS_WITH_AS(gemv_int8(q.view(), x.data(), y, 1, isa), doctest::Contains(isa_name(isa)), Error);
  }
}

TEST_CASE("gemv splits big matrices across the threads it is given") {
  // This file is not built with -fopenmp: the kernels' own regions must still
  // run on the team the caller asked for.
  std::vector<int64_t> ranges(4, -1);
  std::vector<std::thread::id> thread_of(2);
  {
    ThreadCount t(2);
    for_row_ranges(1000, 4096, [&](int64_t begin, int64_t end) {
      const int piece = begin == 0 ? 0 : 1;
      ranges[2 * piece] = begin;
      ranges[2 * piece + 1] = end;
      thread_of[piece] = std::this_thread::get_id();
    });
  }
  CHECK(ranges[0] == 0);
  CHECK(ranges[1] == ranges[2]);
  CHECK(ranges[3] == 1000);
  CHECK(ranges[1] % kRowAlignment == 0);
  CHECK(thread_of[0] != thread_of[1]);
  // Below the minimum piece size one thread does it all.
  int calls = 0;
  {
    ThreadCount t(2);
    for_row_ranges(3, 4096, [&](int64_t, int64_t) { ++calls; });
  }
  CHECK(calls == 1);
}

TEST_CASE("parallel_for: ATen's split, serial below the grain, exceptions reach the caller") {
  ThreadCount t(2);
  std::vector<std::pair<int64_t, int64_t>> pieces(2, {-1, -1});
  parallel_for(101, 10, [&](int64_t begin, int64_t end) { pieces[begin == 0 ? 0 : 1] = {begin, end}; });
  CHECK(pieces[0] == std::pair<int64_t, int64_t>{0, 51});
  CHECK(pieces[1] == std::pair<int64_t, int64_t>{51, 101});
  int calls = 0;
  parallel_for(10, 10, [&](int64_t begin, int64_t end) {
    ++calls;
    CHECK(begin == 0);
    CHECK(end == 10);
  });
  CHECK(calls == 1);
  parallel_for(0, 1, [&](int64_t, int64_t) { ++calls; });
  CHECK(calls == 1);
  CHECK_THROWS_WITH_AS(parallel_for(1000, 1, [](int64_t begin, int64_t) {
                         if (begin > 0) throw Error("second piece failed");
                       }),
                       "second piece failed", Error);
}

TEST_CASE("int8 vs bf16 gemv on the real widths (error per group size)") {
  // Gaussian weights and activations: real checkpoints have heavier tails, so
  // these figures are a floor, not a promise.
  for (int64_t cols : {2048, 6144}) {
    const Problem p = make_problem({512, cols}, 1, 11 + cols);
    const std::vector<float> bf16 = run_bf16(p, active_isa());
    double sum_squares = 0;
    for (float v : bf16) sum_squares += double(v) * v;
    const double rms = std::sqrt(sum_squares / double(bf16.size()));
    for (int64_t group : kGroupSizes) {
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      const std::vector<float> int8 = run_int8(q.view(), p.x, 1, active_isa());
      double max_error = 0, mean_error = 0;
      for (size_t i = 0; i < bf16.size(); ++i) {
        const double e = std::fabs(double(int8[i]) - bf16[i]) / rms;
        max_error = std::max(max_error, e);
        mean_error += e / double(bf16.size());
      }
      MESSAGE("K=" << cols << " group=" << (group == kGroupPerRow ? std::string("row") : std::to_string(group))
                   << ": |int8 - bf16| / rms(y): max " << max_error << ", mean " << mean_error);
      CHECK(mean_error < 0.02);
      CHECK(max_error < 0.1);
    }
  }
}

TEST_CASE("int8 cache file round trip") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qvl_test_kernels_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "weights.q8").string();

  const Problem a = make_problem({33, 100}, 2, 1), b = make_problem({7, 2048}, 2, 2);
  const QuantizedMatrix qa = quantize_int8(a.view(), kGroupPerRow), qb = quantize_int8(b.view(), 64);
  write_int8_cache(path, "fingerprint abc; group 64", {{"layers.0.q", qa.view()}, {"lm_head", qb.view()}});
  CHECK_FALSE(fs::exists(path + ".tmp"));
  {
    const Int8Cache cache(path);
    CHECK(cache.tag() == "fingerprint abc; group 64");
    CHECK(cache.matrices().size() == 2);
    CHECK(cache.find("missing") == nullptr);
    CHECK_THROWS_AS(cache.get("missing"), Error);
    for (const auto& [name, problem, original] :
         {std::tuple{"layers.0.q", &a, &qa.view()}, std::tuple{"lm_head", &b, &qb.view()}}) {
      CAPTURE(name);
      const Int8Matrix& loaded = cache.get(name);
      CHECK(loaded.rows == original->rows);
      CHECK(loaded.cols == original->cols);
      CHECK(loaded.padded_cols == original->padded_cols);
      CHECK(loaded.group_size == original->group_size);
      CHECK(reinterpret_cast<uintptr_t>(loaded.weights) % 64 == 0);
      CHECK(std::memcmp(loaded.weights, original->weights, loaded.weight_bytes()) == 0);
      CHECK(std::memcmp(loaded.scales, original->scales, loaded.scale_bytes()) == 0);
      CHECK(same_bits(run_int8(loaded, problem->x, 2, active_isa()), run_int8(*original, problem->x, 2, active_isa())));
    }
  }

  // Damaged files are refused with a message naming the file.
  const auto bytes = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const auto write_file = [](const std::string& p, const std::string& content) {
    std::ofstream(p, std::ios::binary) << content;
  };
  const std::string damaged = (dir / "damaged.q8").string();
  write_file(damaged, "not a cache");
  CHECK_THROWS_WITH_AS(Int8Cache{damaged}, doctest::Contains(damaged.c_str()), Error);
  write_file(damaged, bytes.substr(0, 40));  // header cut short
  CHECK_THROWS_WITH_AS(Int8Cache{damaged}, doctest::Contains("truncated"), Error);
  write_file(damaged, bytes.substr(0, bytes.size() - 64));  // data cut short
  CHECK_THROWS_WITH_AS(Int8Cache{damaged}, doctest::Contains("lm_head"), Error);
  fs::remove_all(dir);
}
