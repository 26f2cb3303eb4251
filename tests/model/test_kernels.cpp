// The decode GEMV kernels against float64 references computed by ATen, on
// every CPU tier this machine can run (kernels/cpu.h).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/int8_cache.h"
#include "qvl/kernels/quant.h"

#include "torch_test_support.h"

using namespace qvl;
using namespace qvl::kernels;

namespace {

struct Shape {
  int64_t rows, cols;
};
// Odd sizes (not multiples of 16/32/64) and the real model's K.
const std::vector<Shape> kShapes = {{1, 1},   {3, 7},    {17, 33},   {37, 100}, {64, 31},  {129, 65},
                                    {5, 129}, {33, 2048}, {7, 6144}, {250, 2048}, {96, 6144}};

struct Problem {
  at::Tensor w;  // [rows, cols] bf16
  at::Tensor x;  // [batch, cols] float32
  Bf16Matrix view() const {
    return {reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()), w.size(0), w.size(1)};
  }
};

Problem make_problem(Shape s, int64_t batch, uint64_t seed) {
  at::manual_seed(seed);
  Problem p;
  p.w = at::randn({s.rows, s.cols}).to(at::kBFloat16).contiguous();
  p.x = at::randn({batch, s.cols}).contiguous();
  return p;
}

at::Tensor run_bf16(const Problem& p, Isa isa, bool x_is_bf16 = false) {
  at::Tensor y = at::empty({p.x.size(0), p.w.size(0)});
  gemv_bf16(p.view(), p.x.data_ptr<float>(), y.data_ptr<float>(), p.x.size(0), isa, x_is_bf16);
  return y;
}

at::Tensor run_int8(const Int8Matrix& w, const at::Tensor& x, Isa isa) {
  at::Tensor y = at::empty({x.size(0), w.rows});
  gemv_int8(w, x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), isa);
  return y;
}

const std::vector<Isa> kAllTiers = {Isa::Generic, Isa::Neon, Isa::Avx2, Isa::Avx512};

// Every tier this CPU can run, whatever QVL_ISA says.
std::vector<Isa> supported_tiers() {
  std::vector<Isa> tiers;
  for (Isa isa : kAllTiers)
    if (isa_supported(isa)) tiers.push_back(isa);
  return tiers;
}

// The x86 SIMD tiers promise each other's bits; the portable code (generic,
// neon) only its error bound, as it may multiply and add separately.
bool is_simd_x86(Isa isa) { return isa == Isa::Avx2 || isa == Isa::Avx512; }

// Whether gemv_bf16(x_is_bf16 = true) runs the dot-product kernel on `isa`.
bool runs_dot_kernel(Isa isa) { return isa == Isa::Avx512 && cpu_features().avx512_bf16; }

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && std::memcmp(a.data_ptr(), b.data_ptr(), size_t(a.nbytes())) == 0;
}

// |y - reference| relative to sum_k |w_k x_k|, the scale rounding errors grow with.
double scaled_error(const at::Tensor& y, const at::Tensor& w64, const at::Tensor& x64) {
  const at::Tensor reference = at::linear(x64, w64);
  const at::Tensor magnitude = at::linear(x64.abs(), w64.abs()).clamp_min(1e-300);
  return ((y.to(at::kDouble) - reference).abs() / magnitude).max().item<double>();
}

// The int8 matrix's values as float64 [rows, cols], straight from its fields.
at::Tensor dequantized64(const Int8Matrix& m) {
  at::Tensor q = at::from_blob(const_cast<int8_t*>(m.weights), {m.rows, m.padded_cols}, at::kChar)
                     .narrow(1, 0, m.cols)
                     .to(at::kDouble);
  at::Tensor scales = at::from_blob(const_cast<float*>(m.scales), {m.rows, m.groups()}, at::kFloat).to(at::kDouble);
  return q * scales.repeat_interleave(m.group_size, 1).narrow(1, 0, m.cols);
}

struct ThreadCount {
  explicit ThreadCount(int n) : saved(at::get_num_threads()) { at::set_num_threads(n); }
  ~ThreadCount() { at::set_num_threads(saved); }
  int saved;
};

const std::vector<int64_t> kGroupSizes = {64, 128, 256, kGroupPerRow};

}  // namespace

TEST_CASE("bf16 round trip") {
  for (float v : {0.0f, -0.0f, 1.0f, -2.5f, 3.0e38f, 1.5e-30f}) {
    const uint16_t bits = float_to_bf16(v);
    CHECK(bf16_to_float(bits) == doctest::Approx(v).epsilon(1.0 / 256));
    CHECK(float_to_bf16(bf16_to_float(bits)) == bits);
  }
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // Ties go to even, as ATen rounds.
  for (float v : {1.00390625f, 1.01171875f, -7.3f, 123456.7f}) {
    const uint16_t expected = at::tensor({v}).to(at::kBFloat16).view(at::kShort).item<int16_t>();
    CHECK(float_to_bf16(v) == expected);
  }
}

TEST_CASE("bf16 gemv matches the float64 reference on odd and real shapes, on every tier") {
  for (const Shape s : kShapes) {
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const Problem p = make_problem(s, 1, 1000 + s.rows * 7 + s.cols);
    const at::Tensor w64 = p.w.to(at::kDouble), x64 = p.x.to(at::kDouble);
    // x already bf16 values, for the dot-product kernel.
    const Problem p_bf16{p.w, p.x.to(at::kBFloat16).to(at::kFloat)};
    const at::Tensor x_bf16_64 = p_bf16.x.to(at::kDouble);
    at::Tensor simd_result;
    for (Isa isa : supported_tiers()) {
      CAPTURE(isa_name(isa));
      const at::Tensor y = run_bf16(p, isa);
      // float32 accumulation of bf16·f32 products: a few float32 ulps (the
      // portable code also rounds each product where it cannot fuse).
      CHECK(scaled_error(y, w64, x64) < 2e-6);
      if (is_simd_x86(isa)) {
        // avx2 and avx512 give the same bits.
        if (simd_result.defined()) CHECK(same_bits(y, simd_result));
        simd_result = y;
      }
      const at::Tensor y_dot = run_bf16(p_bf16, isa, /*x_is_bf16=*/true);
      if (runs_dot_kernel(isa)) {
        CHECK(scaled_error(y_dot, w64, x_bf16_64) < 1e-5);
      } else {
        // Elsewhere the promise changes nothing.
        CHECK(same_bits(y_dot, run_bf16(p_bf16, isa)));
      }
    }
    if (isa_supported(Isa::Neon)) CHECK(same_bits(run_bf16(p, Isa::Neon), run_bf16(p, Isa::Generic)));
    // Sanity of the harness: ATen's own float32 product agrees as closely.
    CHECK(scaled_error(at::linear(p.x, p.w.to(at::kFloat)), w64, x64) < 2e-6);
  }
}

TEST_CASE("bf16 gemv: a batch gives each vector's own result, on any thread count, on every tier") {
  for (const Shape s : {Shape{37, 100}, Shape{70, 2048}, Shape{9, 6144}, Shape{13, 33}}) {
    for (int64_t batch = 1; batch <= kMaxBatch; ++batch) {
      CAPTURE(s.cols);
      CAPTURE(batch);
      const Problem p = make_problem(s, batch, 77 + batch);
      const Problem p_bf16{p.w, p.x.to(at::kBFloat16).to(at::kFloat)};
      for (Isa isa : supported_tiers()) {
        for (bool x_is_bf16 : {false, true}) {
          CAPTURE(isa_name(isa));
          CAPTURE(x_is_bf16);
          const Problem& problem = x_is_bf16 ? p_bf16 : p;
          const at::Tensor together = run_bf16(problem, isa, x_is_bf16);
          for (int64_t n = 0; n < batch; ++n) {
            const Problem single{problem.w, problem.x.narrow(0, n, 1).contiguous()};
            CHECK(same_bits(run_bf16(single, isa, x_is_bf16), together.narrow(0, n, 1).contiguous()));
          }
        }
      }
    }
  }
  // Rows not a multiple of any row block, and pieces per thread that split blocks.
  for (int64_t batch : {int64_t(1), int64_t(3), int64_t(4), kMaxBatch}) {
    CAPTURE(batch);
    const Problem big = make_problem({1003, 2048}, batch, 5);
    const Problem big_bf16{big.w, big.x.to(at::kBFloat16).to(at::kFloat)};
    at::Tensor simd_result;
    for (Isa isa : supported_tiers()) {
      for (bool x_is_bf16 : {false, true}) {
        CAPTURE(isa_name(isa));
        CAPTURE(x_is_bf16);
        const Problem& problem = x_is_bf16 ? big_bf16 : big;
        at::Tensor one_thread, two_threads;
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
          if (simd_result.defined()) CHECK(same_bits(one_thread, simd_result));
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
  CHECK_THROWS_AS(gemv_bf16(p.view(), x.data(), y, kMaxBatch + 1), Error);
  int unsupported = 0;
  for (Isa isa : kAllTiers) {
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

      const at::Tensor w = p.w.to(at::kDouble);
      const at::Tensor padded = at::constant_pad_nd(w, {0, m.padded_cols - s.cols});
      const at::Tensor group_max = padded.abs().view({s.rows, m.groups(), m.group_size}).amax(2);
      const at::Tensor scales = at::from_blob(const_cast<float*>(m.scales), {s.rows, m.groups()}, at::kFloat);
      CHECK(at::allclose(scales.to(at::kDouble), group_max / 127.0, 1e-6, 0.0));

      const at::Tensor bound = (group_max / 254.0).repeat_interleave(m.group_size, 1).narrow(1, 0, s.cols);
      CHECK(((dequantized64(m) - w).abs() <= bound * (1 + 1e-5)).all().item<bool>());
      // The library's dequantize agrees with the fields.
      at::Tensor out = at::empty({s.rows, s.cols});
      dequantize_int8(m, out.data_ptr<float>());
      CHECK(at::allclose(out.to(at::kDouble), dequantized64(m), 1e-7, 0.0));
      // Padding stays zero, so kernels may read it.
      const at::Tensor q_all = at::from_blob(const_cast<int8_t*>(m.weights), {s.rows, m.padded_cols}, at::kChar);
      CHECK(q_all.narrow(1, s.cols, m.padded_cols - s.cols).eq(0).all().item<bool>());
      CHECK(q_all.abs().le(127).all().item<bool>());
    }
  }
  // An all-zero group quantizes to zero with a zero scale.
  at::Tensor zeros = at::zeros({2, 70}, at::kBFloat16);
  const QuantizedMatrix q = quantize_int8({reinterpret_cast<const uint16_t*>(zeros.data_ptr<at::BFloat16>()), 2, 70}, 64);
  at::Tensor out = at::ones({2, 70});
  dequantize_int8(q.view(), out.data_ptr<float>());
  CHECK(out.eq(0).all().item<bool>());
}

namespace {

// What rounding x to int8 per group may cost: each x_k moves by at most its
// group's max|x| / 254, so y moves by at most sum_k |w_k| · that; plus a few
// float32 ulps of the accumulation.
at::Tensor int8_error_allowed(const Int8Matrix& m, const at::Tensor& w64, const at::Tensor& x64) {
  const at::Tensor x_padded = at::constant_pad_nd(x64, {0, m.padded_cols - m.cols});
  const at::Tensor x_step = (x_padded.abs().view({x64.size(0), m.groups(), m.group_size}).amax(2) / 254.0)
                                .repeat_interleave(m.group_size, 1)
                                .narrow(1, 0, m.cols);
  return at::linear(x_step, w64.abs()) * (1 + 1e-4) + 1e-6 * at::linear(x64.abs(), w64.abs());
}

bool within_int8_error(const at::Tensor& y, const Int8Matrix& m, const at::Tensor& x) {
  const at::Tensor w64 = dequantized64(m), x64 = x.to(at::kDouble);
  return ((y.to(at::kDouble) - at::linear(x64, w64)).abs() <= int8_error_allowed(m, w64, x64)).all().item<bool>();
}

}  // namespace

TEST_CASE("int8 gemv: within its x rounding error on odd and real shapes, on every tier") {
  for (const Shape s : kShapes) {
    for (int64_t group : kGroupSizes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(group);
      const Problem p = make_problem(s, 1, 300 + s.cols + group);
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      const Int8Matrix& m = q.view();
      at::Tensor simd_result;
      for (Isa isa : supported_tiers()) {
        CAPTURE(isa_name(isa));
        const at::Tensor y = run_int8(m, p.x, isa);
        CHECK(within_int8_error(y, m, p.x));
        if (is_simd_x86(isa)) {
          // The avx2 kernel's integer dot products are the VNNI kernel's.
          if (simd_result.defined()) CHECK(same_bits(y, simd_result));
          simd_result = y;
        }
      }
      if (isa_supported(Isa::Neon)) CHECK(same_bits(run_int8(m, p.x, Isa::Neon), run_int8(m, p.x, Isa::Generic)));
    }
  }
}

TEST_CASE("int8 gemv: a batch gives each vector's own result, on every tier") {
  const Problem p = make_problem({45, 2048}, kMaxBatch, 4);
  const QuantizedMatrix q = quantize_int8(p.view(), 128);
  for (Isa isa : supported_tiers()) {
    for (int64_t batch = 1; batch <= kMaxBatch; ++batch) {
      CAPTURE(isa_name(isa));
      CAPTURE(batch);
      const at::Tensor x = p.x.narrow(0, 0, batch).contiguous();
      const at::Tensor together = run_int8(q.view(), x, isa);
      CHECK(within_int8_error(together, q.view(), x));
      for (int64_t n = 0; n < batch; ++n)
        CHECK(same_bits(run_int8(q.view(), x.narrow(0, n, 1).contiguous(), isa), together.narrow(0, n, 1).contiguous()));
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
        const at::Tensor x = p.x.narrow(0, 0, batch).contiguous();
        at::Tensor simd_result;
        for (Isa isa : supported_tiers()) {
          CAPTURE(isa_name(isa));
          at::Tensor one_thread, two_threads;
          {
            ThreadCount t(1);
            one_thread = run_int8(q.view(), x, isa);
          }
          {
            ThreadCount t(2);
            two_threads = run_int8(q.view(), x, isa);
          }
          CHECK(same_bits(one_thread, two_threads));
          CHECK(within_int8_error(one_thread, q.view(), x));
          if (is_simd_x86(isa)) {
            if (simd_result.defined()) CHECK(same_bits(one_thread, simd_result));
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
  at::Tensor w = at::where(at::rand({rows, cols}) < 0.5, 1.0, -1.0).to(at::kBFloat16).contiguous();
  const Problem p{w, at::where(at::rand({2, cols}) < 0.5, 3.0, -3.0).to(at::kFloat).contiguous()};
  for (int64_t group : {int64_t(64), kGroupPerRow}) {
    CAPTURE(group);
    const QuantizedMatrix q = quantize_int8(p.view(), group);
    // Exactly representable: q = ±127, x = ±127 levels, the sum is an integer
    // times the scales, so every tier must agree with the float64 product.
    const at::Tensor expected = at::linear(p.x.to(at::kDouble), w.to(at::kDouble));
    at::Tensor simd_result;
    for (Isa isa : supported_tiers()) {
      CAPTURE(isa_name(isa));
      const at::Tensor y = run_int8(q.view(), p.x, isa);
      CHECK(at::allclose(y.to(at::kDouble), expected, 1e-6, 1e-3));
      if (is_simd_x86(isa)) {
        if (simd_result.defined()) CHECK(same_bits(y, simd_result));
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
  CHECK_THROWS_AS(gemv_int8(q.view(), x.data(), y, kMaxBatch + 1), Error);
  for (Isa isa : kAllTiers) {
    if (isa_supported(isa)) continue;
    CAPTURE(isa_name(isa));
    CHECK_THROWS_WITH_AS(gemv_int8(q.view(), x.data(), y, 1, isa), doctest::Contains(isa_name(isa)), Error);
  }
}

TEST_CASE("gemv splits big matrices across the threads it is given") {
  // at::parallel_for would silently run serially here (it is an inline
  // template, and this file is not built with -fopenmp): the kernels must not.
  std::vector<int64_t> ranges(4, -1);
  std::vector<std::thread::id> thread_of(2);
  {
    ThreadCount t(2);
    kernels::detail::for_row_ranges(1000, 4096, [&](int64_t begin, int64_t end) {
      const int piece = begin == 0 ? 0 : 1;
      ranges[2 * piece] = begin;
      ranges[2 * piece + 1] = end;
      thread_of[piece] = std::this_thread::get_id();
    });
  }
  CHECK(ranges[0] == 0);
  CHECK(ranges[1] == ranges[2]);
  CHECK(ranges[3] == 1000);
  CHECK(ranges[1] % kernels::detail::kRowAlignment == 0);
  CHECK(thread_of[0] != thread_of[1]);
  // Below the minimum piece size one thread does it all.
  int calls = 0;
  {
    ThreadCount t(2);
    kernels::detail::for_row_ranges(3, 4096, [&](int64_t, int64_t) { ++calls; });
  }
  CHECK(calls == 1);
}

TEST_CASE("int8 vs bf16 gemv on the real widths (error per group size)") {
  // Gaussian weights and activations: real checkpoints have heavier tails, so
  // these figures are a floor, not a promise.
  for (int64_t cols : {2048, 6144}) {
    const Problem p = make_problem({512, cols}, 1, 11 + cols);
    const at::Tensor bf16 = run_bf16(p, active_isa()).to(at::kDouble);
    const double rms = bf16.pow(2).mean().sqrt().item<double>();
    for (int64_t group : kGroupSizes) {
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      const at::Tensor diff = (run_int8(q.view(), p.x, active_isa()).to(at::kDouble) - bf16).abs() / rms;
      const double max_error = diff.max().item<double>(), mean_error = diff.mean().item<double>();
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
      CHECK(same_bits(run_int8(loaded, problem->x, active_isa()), run_int8(*original, problem->x, active_isa())));
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
