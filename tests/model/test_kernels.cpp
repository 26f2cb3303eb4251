// The decode GEMV kernels against float64 references computed by ATen.
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

at::Tensor run_bf16(const Problem& p, Bf16Path path) {
  at::Tensor y = at::empty({p.x.size(0), p.w.size(0)});
  gemv_bf16(p.view(), p.x.data_ptr<float>(), y.data_ptr<float>(), p.x.size(0), path);
  return y;
}

at::Tensor run_int8(const Int8Matrix& w, const at::Tensor& x, Int8Path path) {
  at::Tensor y = at::empty({x.size(0), w.rows});
  gemv_int8(w, x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), path);
  return y;
}

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

TEST_CASE("bf16 gemv matches the float64 reference on odd and real shapes") {
  for (const Shape s : kShapes) {
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const Problem p = make_problem(s, 1, 1000 + s.rows * 7 + s.cols);
    const at::Tensor w64 = p.w.to(at::kDouble), x64 = p.x.to(at::kDouble);
    const at::Tensor best = run_bf16(p, Bf16Path::Best);
    // float32 accumulation of exact bf16·f32 products: a few float32 ulps.
    CHECK(scaled_error(best, w64, x64) < 2e-6);
    // The portable path gives the same bits as the AVX-512 one.
    CHECK(same_bits(run_bf16(p, Bf16Path::Scalar), best));
    if (path_supported(Bf16Path::Avx512Fma)) CHECK(same_bits(run_bf16(p, Bf16Path::Avx512Fma), best));
    if (path_supported(Bf16Path::Avx512DotBf16)) {
      // dpbf16 rounds x to bf16 first: exact against a reference with that x.
      const at::Tensor x_rounded = p.x.to(at::kBFloat16).to(at::kDouble);
      CHECK(scaled_error(run_bf16(p, Bf16Path::Avx512DotBf16), w64, x_rounded) < 1e-5);
    }
    // Sanity of the harness: ATen's own float32 product agrees as closely.
    CHECK(scaled_error(at::linear(p.x, p.w.to(at::kFloat)), w64, x64) < 2e-6);
  }
}

TEST_CASE("bf16 gemv: a batch gives each vector's own result, on any thread count") {
  for (const Shape s : {Shape{37, 100}, Shape{70, 2048}, Shape{9, 6144}, Shape{13, 33}}) {
    for (int64_t batch = 1; batch <= kMaxBatch; ++batch) {
      CAPTURE(s.cols);
      CAPTURE(batch);
      const Problem p = make_problem(s, batch, 77 + batch);
      for (Bf16Path path : {Bf16Path::Scalar, Bf16Path::Avx512Fma, Bf16Path::Avx512DotBf16}) {
        if (!path_supported(path)) continue;
        CAPTURE(path_name(path));
        const at::Tensor together = run_bf16(p, path);
        for (int64_t n = 0; n < batch; ++n) {
          const Problem single{p.w, p.x.narrow(0, n, 1).contiguous()};
          CHECK(same_bits(run_bf16(single, path), together.narrow(0, n, 1).contiguous()));
        }
      }
    }
  }
  for (int64_t batch : {int64_t(1), int64_t(3), kMaxBatch}) {
    CAPTURE(batch);
    const Problem big = make_problem({1003, 2048}, batch, 5);
    at::Tensor one_thread, two_threads;
    {
      ThreadCount t(1);
      one_thread = run_bf16(big, Bf16Path::Scalar);
    }
    {
      ThreadCount t(2);
      two_threads = run_bf16(big, Bf16Path::Best);
    }
    CHECK(same_bits(one_thread, two_threads));
  }
}

TEST_CASE("bf16 gemv rejects a bad batch") {
  const Problem p = make_problem({4, 8}, 1, 1);
  float y[4 * 9];
  std::vector<float> x(8 * 9, 0.0f);
  CHECK_THROWS_AS(gemv_bf16(p.view(), x.data(), y, 0), Error);
  CHECK_THROWS_AS(gemv_bf16(p.view(), x.data(), y, kMaxBatch + 1), Error);
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

TEST_CASE("int8 gemv: float-x path is exact for the dequantized weights, int8-x within its x error") {
  for (const Shape s : kShapes) {
    for (int64_t group : kGroupSizes) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(group);
      const Problem p = make_problem(s, 1, 300 + s.cols + group);
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      const Int8Matrix& m = q.view();
      const at::Tensor w64 = dequantized64(m), x64 = p.x.to(at::kDouble);

      const at::Tensor float_x = run_int8(m, p.x, Int8Path::FloatXScalar);
      CHECK(scaled_error(float_x, w64, x64) < 2e-6);
      if (path_supported(Int8Path::FloatXAvx512)) CHECK(same_bits(run_int8(m, p.x, Int8Path::FloatXAvx512), float_x));

      // Rounding x to int8 per group moves each x_k by at most its group's
      // max|x| / 254, so y moves by at most sum_k |w_k| · that.
      const at::Tensor int8_x = run_int8(m, p.x, Int8Path::Int8XScalar);
      const at::Tensor x_padded = at::constant_pad_nd(x64, {0, m.padded_cols - s.cols});
      const at::Tensor x_step = (x_padded.abs().view({1, m.groups(), m.group_size}).amax(2) / 254.0)
                                    .repeat_interleave(m.group_size, 1)
                                    .narrow(1, 0, s.cols);
      const at::Tensor allowed = at::linear(x_step, w64.abs()) * (1 + 1e-4) + 1e-6 * at::linear(x64.abs(), w64.abs());
      CHECK(((int8_x.to(at::kDouble) - at::linear(x64, w64)).abs() <= allowed).all().item<bool>());
      if (path_supported(Int8Path::Int8XVnni)) CHECK(same_bits(run_int8(m, p.x, Int8Path::Int8XVnni), int8_x));
      CHECK(same_bits(run_int8(m, p.x, Int8Path::Best), int8_x));
    }
  }
}

TEST_CASE("int8 gemv: a batch gives each vector's own result") {
  const Problem p = make_problem({45, 2048}, kMaxBatch, 4);
  const QuantizedMatrix q = quantize_int8(p.view(), 128);
  for (Int8Path path : {Int8Path::FloatXScalar, Int8Path::FloatXAvx512, Int8Path::Int8XScalar, Int8Path::Int8XVnni}) {
    if (!path_supported(path)) continue;
    for (int64_t batch = 1; batch <= kMaxBatch; ++batch) {
      CAPTURE(path_name(path));
      CAPTURE(batch);
      const at::Tensor x = p.x.narrow(0, 0, batch).contiguous();
      const at::Tensor together = run_int8(q.view(), x, path);
      for (int64_t n = 0; n < batch; ++n)
        CHECK(same_bits(run_int8(q.view(), x.narrow(0, n, 1).contiguous(), path), together.narrow(0, n, 1).contiguous()));
    }
  }
}

TEST_CASE("int8 gemv: batches 1..8 on odd shapes, scalar = AVX-512 bits, any thread count") {
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
        for (auto [scalar, avx512] : {std::pair{Int8Path::FloatXScalar, Int8Path::FloatXAvx512},
                                      std::pair{Int8Path::Int8XScalar, Int8Path::Int8XVnni}}) {
          at::Tensor one_thread, two_threads;
          {
            ThreadCount t(1);
            one_thread = run_int8(q.view(), x, scalar);
          }
          if (!path_supported(avx512)) continue;
          {
            ThreadCount t(2);
            two_threads = run_int8(q.view(), x, avx512);
          }
          CHECK(same_bits(one_thread, two_threads));
          for (int64_t n = 0; n < batch; ++n)
            CHECK(same_bits(run_int8(q.view(), x.narrow(0, n, 1).contiguous(), avx512), one_thread.narrow(0, n, 1)
                                                                                            .contiguous()));
        }
      }
    }
  }
}

TEST_CASE("int8 gemv: extreme values, where vpdpbusd sees x+128 = 1 or 255") {
  // Every weight at ±127 and every x at ± its group maximum: the largest
  // products and sums the integer path meets on one 6144-wide row.
  const int64_t rows = 9, cols = 6144;
  at::Tensor w = at::where(at::rand({rows, cols}) < 0.5, 1.0, -1.0).to(at::kBFloat16).contiguous();
  const Problem p{w, at::where(at::rand({2, cols}) < 0.5, 3.0, -3.0).to(at::kFloat).contiguous()};
  for (int64_t group : {int64_t(64), kGroupPerRow}) {
    CAPTURE(group);
    const QuantizedMatrix q = quantize_int8(p.view(), group);
    // Exactly representable: q = ±127, x = ±127 levels, the sum is an integer
    // times the scales, so every path must agree with the float64 product.
    const at::Tensor expected = at::linear(p.x.to(at::kDouble), w.to(at::kDouble));
    const at::Tensor int8_x = run_int8(q.view(), p.x, Int8Path::Int8XScalar);
    CHECK(at::allclose(int8_x.to(at::kDouble), expected, 1e-6, 1e-3));
    if (path_supported(Int8Path::Int8XVnni)) CHECK(same_bits(run_int8(q.view(), p.x, Int8Path::Int8XVnni), int8_x));
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
    const at::Tensor bf16 = run_bf16(p, Bf16Path::Best).to(at::kDouble);
    const double rms = bf16.pow(2).mean().sqrt().item<double>();
    for (int64_t group : kGroupSizes) {
      const QuantizedMatrix q = quantize_int8(p.view(), group);
      for (Int8Path path : {Int8Path::FloatXScalar, Int8Path::Int8XScalar}) {
        const at::Tensor diff = (run_int8(q.view(), p.x, path).to(at::kDouble) - bf16).abs() / rms;
        const double max_error = diff.max().item<double>(), mean_error = diff.mean().item<double>();
        MESSAGE("K=" << cols << " group=" << (group == kGroupPerRow ? std::string("row") : std::to_string(group))
                     << " " << std::string(path_name(path)) << ": |int8 - bf16| / rms(y): max " << max_error << ", mean "
                     << mean_error);
        CHECK(mean_error < 0.02);
        CHECK(max_error < 0.1);
      }
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
      CHECK(same_bits(run_int8(loaded, problem->x, Int8Path::Best), run_int8(*original, problem->x, Int8Path::Best)));
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
