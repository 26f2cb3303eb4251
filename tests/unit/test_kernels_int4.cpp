// The 4-bit weight kernels (kernels/quant4.h) against references computed
// here from the documented layout, on every CPU tier this machine can run.
// No torch: these run in the sanitizer stage too.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/error.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/int4_cache.h"
#include "qvl/kernels/quant4.h"

using namespace qvl;
using namespace qvl::kernels;
using qvl::test::same_bits;
using qvl::test::supported_tiers;
using qvl::test::ThreadCount;

namespace {

struct Weights {
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t> bf16;
  Bf16Matrix view() const { return {bf16.data(), rows, cols}; }
  double at(int64_t r, int64_t k) const { return bf16_to_float(bf16[size_t(r * cols + k)]); }
};

Weights make_weights(int64_t rows, int64_t cols, uint64_t seed, float spread = 0.05f) {
  return {rows, cols, test::to_bf16(test::normal_values(rows * cols, seed, spread))};
}

// The documented layout read byte by byte (quant4.h), independent of int4_level.
struct Fields {
  double scale, min;
  int level;
};
Fields fields(const Int4Matrix& m, int64_t r, int64_t k) {
  const int64_t g = k / 64, j = k % 64;
  const uint8_t byte = m.levels[r * (m.padded_cols / 2) + g * 32 + (j % 32)];
  const int64_t p = (r * (m.padded_cols / 64) + g) * 2;
  return {f16_to_float(m.params[p]), f16_to_float(m.params[p + 1]), j < 32 ? byte & 15 : byte >> 4};
}
double dequantized(const Int4Matrix& m, int64_t r, int64_t k) {
  const Fields f = fields(m, r, k);
  return f.level * f.scale + f.min;
}

// y as the kernels must compute it: x quantized per 64 columns to int8
// (scale max|x| / 127, round half to even), exact integer dot products of
// levels and xq per group, then s·x_scale·dot + m·x_scale·sum xq, in float64.
// Also the sum of the magnitudes of those terms (float32 accumulation errors
// scale with it).
struct Reference {
  std::vector<double> y, magnitude;
};
Reference reference_gemv(const Int4Matrix& m, const std::vector<float>& x, int64_t batch) {
  Reference ref{std::vector<double>(size_t(batch * m.rows)), std::vector<double>(size_t(batch * m.rows))};
  for (int64_t n = 0; n < batch; ++n) {
    const float* xn = x.data() + n * m.cols;
    for (int64_t g = 0; g * 64 < m.cols; ++g) {
      const int64_t first = g * 64, last = std::min(first + 64, m.cols);
      float max_abs = 0;
      for (int64_t k = first; k < last; ++k) max_abs = std::max(max_abs, std::fabs(xn[k]));
      const float x_scale = max_abs / 127.0f;
      if (x_scale == 0) continue;
      std::vector<int> xq;
      int64_t x_sum = 0;
      for (int64_t k = first; k < last; ++k) {
        xq.push_back(int(std::clamp(std::nearbyint(xn[k] / x_scale), -127.0f, 127.0f)));
        x_sum += xq.back();
      }
      for (int64_t r = 0; r < m.rows; ++r) {
        int64_t dot = 0;
        for (int64_t k = first; k < last; ++k) dot += int64_t(fields(m, r, k).level) * xq[size_t(k - first)];
        const Fields f = fields(m, r, first);
        const double a = f.scale * double(x_scale) * double(dot), b = f.min * double(x_scale) * double(x_sum);
        ref.y[size_t(n * m.rows + r)] += a + b;
        ref.magnitude[size_t(n * m.rows + r)] += std::fabs(a) + std::fabs(b);
      }
    }
  }
  return ref;
}

std::vector<float> run_int4(const Int4Matrix& m, const std::vector<float>& x, int64_t batch, Isa isa) {
  std::vector<float> y(size_t(batch * m.rows));
  gemv_int4(m, x.data(), y.data(), batch, isa);
  return y;
}

// Within float32 accumulation error of the reference: a few ulps of the sum of
// the magnitudes (the integer parts are exact on every tier).
bool matches_reference(const std::vector<float>& y, const Reference& ref) {
  for (size_t i = 0; i < y.size(); ++i)
    if (!(std::fabs(double(y[i]) - ref.y[i]) <= 2e-6 * ref.magnitude[i] + 1e-30)) return false;
  return true;
}

}  // namespace

TEST_CASE("float16 conversions: known values, every float16 round trips, rounding to nearest even") {
  CHECK(float_to_f16(1.0f) == 0x3c00);
  CHECK(float_to_f16(-2.0f) == 0xc000);
  CHECK(float_to_f16(0.0f) == 0x0000);
  CHECK(float_to_f16(65504.0f) == 0x7bff);
  CHECK(float_to_f16(1e9f) == 0x7bff);  // saturates: a scale never needs infinity
  CHECK(float_to_f16(0.1f) == 0x2e66);
  CHECK(float_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // the smallest subnormal
  CHECK(float_to_f16(std::ldexp(1.0f, -26)) == 0x0000);  // below half of it
  CHECK(float_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // a tie: to even
  CHECK(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // a tie: to even (up)
  CHECK(f16_to_float(0x3555) == doctest::Approx(0.333251953125).epsilon(1e-12));
  CHECK(f16_to_float(0x8001) == -std::ldexp(1.0f, -24));
  bool round_trips = true;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint32_t exponent = (h >> 10) & 31;
    if (exponent == 31) continue;  // infinities and NaNs: never made
    round_trips &= float_to_f16(f16_to_float(uint16_t(h))) == h;
  }
  CHECK(round_trips);
}

TEST_CASE("int4 quantize: layout, padding, every weight within half a step of its level (or clipped), RMS error") {
  for (const auto [rows, cols] : {std::pair{5, 7}, {19, 100}, {8, 2048}, {3, 6144}, {4, 200}}) {
    CAPTURE(cols);
    const Weights w = make_weights(rows, cols, 7 + cols);
    const QuantizedInt4Matrix q = quantize_int4(w.view());
    const Int4Matrix& m = q.view();
    CHECK(m.rows == rows);
    CHECK(m.cols == cols);
    CHECK(m.padded_cols % 128 == 0);
    CHECK(m.padded_cols >= cols);
    CHECK(m.padded_cols - cols < 128);
    bool within = true, padding_zero = true;
    double error_squares = 0, squares = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < m.padded_cols; ++k) {
        const Fields f = fields(m, r, k);
        if (k >= cols) {
          padding_zero &= f.level == 0;
          if (k / 64 * 64 >= cols) padding_zero &= f.scale == 0 && f.min == 0;
          continue;
        }
        const double v = w.at(r, k), top = f.min + 15 * f.scale;
        const double clipped = std::max({0.0, v - top, f.min - v});
        const double d = std::fabs(dequantized(m, r, k) - v);
        within &= d <= f.scale / 2 * (1 + 1e-5) + clipped + 1e-9;
        error_squares += d * d;
        squares += v * v;
      }
    }
    CHECK(within);
    CHECK(padding_zero);
    // Gaussian weights, 64 per group with an offset: measured 0.086 (quant4.h).
    const double relative_rms = std::sqrt(error_squares / squares);
    MESSAGE("cols " << cols << ": relative RMS error of the dequantized weights " << relative_rms);
    if (cols >= 2048) CHECK(relative_rms < 0.095);

    // dequantize_int4_rows: float32 is level · scale + min, bf16 its rounding.
    std::vector<float> f32(size_t(rows * cols));
    std::vector<uint16_t> bf16(size_t(rows * cols));
    dequantize_int4_rows(m, 0, rows, Storage::F32, f32.data());
    dequantize_int4_rows(m, 0, rows, Storage::BF16, bf16.data());
    bool agrees = true;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const double expected = dequantized(m, r, k);
        agrees &= std::fabs(f32[size_t(r * cols + k)] - expected) <= 1e-6 * std::fabs(expected) + 1e-12;
        agrees &= bf16[size_t(r * cols + k)] == float_to_bf16(f32[size_t(r * cols + k)]);
      }
    CHECK(agrees);
    // int4_level reads the same layout.
    bool levels_agree = true;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) levels_agree &= int4_level(m, r, k) == fields(m, r, k).level;
    CHECK(levels_agree);
  }
  // A constant group is exact; a zero row dequantizes to zeros.
  std::vector<uint16_t> constant(2 * 64, float_to_bf16(0.25f));
  std::fill(constant.begin() + 64, constant.end(), uint16_t(0));
  const QuantizedInt4Matrix q = quantize_int4({constant.data(), 2, 64});
  std::vector<float> out(2 * 64, -1.0f);
  dequantize_int4_rows(q.view(), 0, 2, Storage::F32, out.data());
  CHECK(std::all_of(out.begin(), out.begin() + 64, [](float v) { return v == 0.25f; }));
  CHECK(std::all_of(out.begin() + 64, out.end(), [](float v) { return v == 0.0f; }));
  // Rows outside the matrix are refused.
  CHECK_THROWS_AS(dequantize_int4_rows(q.view(), 1, 2, Storage::F32, out.data()), Error);
  CHECK_THROWS_AS(dequantize_int4_rows(q.view(), -1, 1, Storage::F32, out.data()), Error);
}

TEST_CASE("int4 gemv matches the reference on odd and real shapes, batches 1..32, 1 and 2 threads, every tier") {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{17, 65}, Shape{37, 100}, Shape{13, 129}, Shape{61, 2048},
                        Shape{7, 6144}, Shape{1003, 640}}) {
    const Weights w = make_weights(s.rows, s.cols, 100 + s.rows + s.cols);
    const QuantizedInt4Matrix q = quantize_int4(w.view());
    const std::vector<float> x_all = test::normal_values(kMaxVectors * s.cols, 5 + s.cols);
    // Above kMaxBatch, groups of vectors over tiles of rows (1003 x 640: tiles of 300 rows).
    for (int64_t batch : {int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(5), kMaxBatch, int64_t(15),
                          kMaxVectors}) {
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      CAPTURE(batch);
      const std::vector<float> x(x_all.begin(), x_all.begin() + batch * s.cols);
      const Reference ref = reference_gemv(q.view(), x, batch);
      for (Isa isa : supported_tiers()) {
        const std::string tier = isa_name(isa);
        CAPTURE(tier);
        std::vector<float> one_thread, two_threads;
        {
          ThreadCount t(1);
          one_thread = run_int4(q.view(), x, batch, isa);
        }
        {
          ThreadCount t(2);
          two_threads = run_int4(q.view(), x, batch, isa);
        }
        CHECK(matches_reference(one_thread, ref));
        CHECK(same_bits(one_thread, two_threads));
        // A vector of a batch gets what it gets alone.
        const std::vector<float> alone = run_int4(q.view(), std::vector<float>(x.end() - s.cols, x.end()), 1, isa);
        CHECK(same_bits(alone, std::vector<float>(one_thread.end() - s.rows, one_thread.end())));
      }
    }
  }
}

TEST_CASE("int4 gemv: extreme levels and x, where vpmaddubsw and vpdpbusd meet their largest sums") {
  // Weights of two values, 15 steps of 0.125 apart (exact in float16), make
  // levels 0 and 15 only; x at ± its
  // group maximum makes every xq ±127.
  const int64_t rows = 9, cols = 6144;
  std::vector<uint16_t> bits;
  std::vector<float> x;
  for (int64_t i = 0; i < rows * cols; ++i) bits.push_back(float_to_bf16((i * 7919) % 3 ? 1.375f : -0.5f));
  for (int64_t i = 0; i < 2 * cols; ++i) x.push_back((i * 104729) % 5 < 2 ? 3.0f : -3.0f);
  const QuantizedInt4Matrix q = quantize_int4({bits.data(), rows, cols});
  const Reference ref = reference_gemv(q.view(), x, 2);
  for (Isa isa : supported_tiers()) {
    const std::string tier = isa_name(isa);
        CAPTURE(tier);
    const std::vector<float> y = run_int4(q.view(), x, 2, isa);
    CHECK(matches_reference(y, ref));
    // Here the quantization is exact: the true product.
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t r = 0; r < rows; ++r) {
        double expected = 0;
        for (int64_t k = 0; k < cols; ++k)
          expected += double(bf16_to_float(bits[size_t(r * cols + k)])) * x[size_t(n * cols + k)];
        CHECK(std::fabs(y[size_t(n * rows + r)] - expected) <= 1e-5 * std::fabs(expected) + 1e-2);
      }
  }
}

TEST_CASE("int4 vs bf16 gemv on the real widths") {
  // Gaussian weights and activations: how far the 4-bit product is from the
  // bf16 one, relative to rms(y). Real checkpoints have heavier tails.
  for (int64_t cols : {2048, 6144}) {
    const Weights w = make_weights(512, cols, 11 + cols);
    const std::vector<float> x = test::normal_values(cols, 12 + cols);
    std::vector<float> bf16(512);
    gemv_bf16(w.view(), x.data(), bf16.data(), 1, active_isa());
    const QuantizedInt4Matrix q = quantize_int4(w.view());
    const std::vector<float> int4 = run_int4(q.view(), x, 1, active_isa());
    double squares = 0, max_error = 0, mean_error = 0;
    for (float v : bf16) squares += double(v) * v;
    const double rms = std::sqrt(squares / 512);
    for (size_t i = 0; i < bf16.size(); ++i) {
      const double e = std::fabs(double(int4[i]) - bf16[i]) / rms;
      max_error = std::max(max_error, e);
      mean_error += e / 512;
    }
    MESSAGE("K=" << cols << ": |int4 - bf16| / rms(y): max " << max_error << ", mean " << mean_error);
    // The weights' relative error (~0.086) carries over to y as a random walk.
    CHECK(mean_error < 0.1);
    CHECK(max_error < 0.45);
  }
}

TEST_CASE("int4 gemv rejects a bad batch, a bad layout and a tier this CPU cannot run") {
  const Weights w = make_weights(4, 70, 1);
  const QuantizedInt4Matrix q = quantize_int4(w.view());
  float y[4 * 9];
  std::vector<float> x(70 * 9, 0.0f);
  CHECK_THROWS_AS(gemv_int4(q.view(), x.data(), y, 0), Error);
  CHECK_THROWS_AS(gemv_int4(q.view(), x.data(), y, kMaxVectors + 1), Error);
  Int4Matrix bad = q.view();
  bad.padded_cols = 64;
  CHECK_THROWS_AS(gemv_int4(bad, x.data(), y, 1), Error);
  bad = q.view();
  bad.group_size = 32;
  CHECK_THROWS_AS(gemv_int4(bad, x.data(), y, 1), Error);
  for (Isa isa : test::kAllTiers) {
    if (isa_supported(isa)) continue;
    const std::string tier = isa_name(isa);
        CAPTURE(tier);
    CHECK_THROWS_WITH_AS(gemv_int4(q.view(), x.data(), y, 1, isa), doctest::Contains(isa_name(isa)), Error);
  }
}

TEST_CASE("int4 cache file round trip; damaged files refused naming the file") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("qvl_test_int4_cache_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "weights.q4").string();
  const Weights a = make_weights(33, 100, 1), b = make_weights(7, 2048, 2);
  const QuantizedInt4Matrix qa = quantize_int4(a.view()), qb = quantize_int4(b.view());
  write_int4_cache(path, "fingerprint abc", {{"layers.0.q", qa.view()}, {"lm_head", qb.view()}});
  CHECK_FALSE(fs::exists(path + ".tmp"));
  {
    const Int4Cache cache(path);
    CHECK(cache.tag() == "fingerprint abc");
    CHECK(cache.matrices().size() == 2);
    CHECK(cache.find("missing") == nullptr);
    CHECK_THROWS_AS(cache.get("missing"), Error);
    for (const auto& [name, original] : {std::pair{"layers.0.q", &qa.view()}, std::pair{"lm_head", &qb.view()}}) {
      CAPTURE(name);
      const Int4Matrix& loaded = cache.get(name);
      CHECK(loaded.rows == original->rows);
      CHECK(loaded.cols == original->cols);
      CHECK(loaded.padded_cols == original->padded_cols);
      CHECK(reinterpret_cast<uintptr_t>(loaded.levels) % 64 == 0);
      CHECK(std::memcmp(loaded.levels, original->levels, loaded.level_bytes()) == 0);
      CHECK(std::memcmp(loaded.params, original->params, loaded.param_bytes()) == 0);
    }
  }
  const auto bytes = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const auto write_file = [](const std::string& p, const std::string& content) {
    std::ofstream(p, std::ios::binary) << content;
  };
  const std::string damaged = (dir / "damaged.q4").string();
  write_file(damaged, "not a cache");
  CHECK_THROWS_WITH_AS(Int4Cache{damaged}, doctest::Contains(damaged.c_str()), Error);
  write_file(damaged, bytes.substr(0, 40));  // header cut short
  CHECK_THROWS_WITH_AS(Int4Cache{damaged}, doctest::Contains("truncated"), Error);
  write_file(damaged, bytes.substr(0, bytes.size() - 64));  // data cut short
  CHECK_THROWS_WITH_AS(Int4Cache{damaged}, doctest::Contains("lm_head"), Error);
  std::string int8_magic = bytes;
  int8_magic[6] = '8';  // an int8 cache is not an int4 one
  write_file(damaged, int8_magic);
  CHECK_THROWS_WITH_AS(Int4Cache{damaged}, doctest::Contains("not a qvl int4 cache"), Error);
  fs::remove_all(dir);
}
