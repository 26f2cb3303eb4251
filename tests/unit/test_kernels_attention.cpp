// The fused attention kernel (kernels/attention.h) against attention computed
// here in float64 from the same stored values: every tier this CPU runs, f32
// and bf16 storage, several images of different lengths (odd ones, one
// shorter than a key block, one key), blocks of queries that are not whole
// tiles, and scores large enough that the running maximum moves from key
// block to key block. Runs without torch, in the sanitizer stage too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/error.h"
#include "qvl/kernels/attention.h"
#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/vision_ops.h"

using namespace qvl;
using namespace qvl::kernels;

namespace {

// q, k, v [heads, tokens, head_dim] and out [tokens, heads, head_dim] in one storage.
struct Problem {
  Storage storage;
  int64_t heads, head_dim, tokens;
  std::vector<int64_t> lengths;
  std::vector<float> q, k, v;  // the stored values, as floats
  std::vector<uint16_t> q16, k16, v16;

  Problem(Storage s, int64_t heads_, int64_t head_dim_, std::vector<int64_t> lengths_, float query_spread)
      : storage(s), heads(heads_), head_dim(head_dim_), tokens(0), lengths(std::move(lengths_)) {
    for (int64_t length : lengths) tokens += length;
    const int64_t n = heads * tokens * head_dim;
    q = test::normal_values(n, 11, query_spread);
    k = test::normal_values(n, 12);
    v = test::normal_values(n, 13, 1.0f, 0.3f);
    if (s == Storage::BF16) {
      q16 = test::to_bf16(q), k16 = test::to_bf16(k), v16 = test::to_bf16(v);
      for (size_t i = 0; i < size_t(n); ++i)
        q[i] = bf16_to_float(q16[i]), k[i] = bf16_to_float(k16[i]), v[i] = bf16_to_float(v16[i]);
    }
  }
  const void* ptr(const std::vector<float>& f, const std::vector<uint16_t>& b) const {
    return storage == Storage::F32 ? static_cast<const void*>(f.data()) : b.data();
  }

  // Output [tokens, heads, head_dim] in float64.
  std::vector<double> reference(float scale) const {
    std::vector<double> out(size_t(tokens * heads * head_dim));
    int64_t start = 0;
    for (int64_t length : lengths) {
      for (int64_t h = 0; h < heads; ++h) {
        const auto at = [&](const std::vector<float>& x, int64_t token, int64_t d) {
          return double(x[size_t((h * tokens + start + token) * head_dim + d)]);
        };
        std::vector<double> p(static_cast<size_t>(length));
        for (int64_t i = 0; i < length; ++i) {
          double max = -INFINITY, sum = 0;
          for (int64_t j = 0; j < length; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < head_dim; ++d) dot += at(q, i, d) * at(k, j, d);
            p[size_t(j)] = dot * double(scale);
            max = std::max(max, p[size_t(j)]);
          }
          for (double& x : p) sum += (x = std::exp(x - max));
          for (int64_t d = 0; d < head_dim; ++d) {
            double acc = 0;
            for (int64_t j = 0; j < length; ++j) acc += p[size_t(j)] * at(v, j, d);
            out[size_t(((start + i) * heads + h) * head_dim + d)] = acc / sum;
          }
        }
      }
      start += length;
    }
    return out;
  }

  // Attention as qvl computed it before the fused kernel, in float32: the
  // score rows, softmax_rows of `isa`, then the weighted sums of the values.
  std::vector<float> unfused(float scale, Isa isa) const {
    std::vector<float> out(size_t(tokens * heads * head_dim));
    int64_t start = 0;
    for (int64_t length : lengths) {
      for (int64_t h = 0; h < heads; ++h) {
        const auto at = [&](const std::vector<float>& x, int64_t token, int64_t d) {
          return x[size_t((h * tokens + start + token) * head_dim + d)];
        };
        std::vector<float> p(static_cast<size_t>(length));
        for (int64_t i = 0; i < length; ++i) {
          for (int64_t j = 0; j < length; ++j) {
            float dot = 0;
            for (int64_t d = 0; d < head_dim; ++d) dot += at(q, i, d) * at(k, j, d);
            p[size_t(j)] = dot;
          }
          softmax_rows(Storage::F32, p.data(), 1, length, scale, isa);
          for (int64_t d = 0; d < head_dim; ++d) {
            float acc = 0;
            for (int64_t j = 0; j < length; ++j) acc += p[size_t(j)] * at(v, j, d);
            out[size_t(((start + i) * heads + h) * head_dim + d)] = acc;
          }
        }
      }
      start += length;
    }
    return out;
  }

  // The kernel's output, block by block of `chunk` queries, as floats; rows
  // no block wrote stay NaN.
  template <class Attend>
  std::vector<float> run(int64_t chunk, float scale, Attend attend) const {
    std::vector<float> out(size_t(tokens * heads * head_dim), NAN);
    std::vector<uint16_t> out16(out.size(), 0x7fc0);  // a bf16 NaN
    void* out_ptr = storage == Storage::F32 ? static_cast<void*>(out.data()) : out16.data();
    const AttentionTensors t{ptr(q, q16), ptr(k, k16), ptr(v, v16), out_ptr, tokens, heads, head_dim};
    int64_t start = 0;
    for (int64_t length : lengths) {
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t q0 = 0; q0 < length; q0 += chunk)
          attend(t, AttentionBlock{h, start, length, q0, std::min(chunk, length - q0)});
      start += length;
    }
    if (storage == Storage::BF16)
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(out16[i]);
    return out;
  }
};

// The largest |got - want| (infinite if a value is NaN: a row not written).
double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double(got[i]) - want[i]);
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

// The mean |got - want| (the steadier figure to compare two float32 ways by).
double mean_error(const std::vector<float>& got, const std::vector<double>& want) {
  double total = 0;
  for (size_t i = 0; i < got.size(); ++i) total += std::abs(double(got[i]) - want[i]);
  return total / double(got.size());
}

// Images of several lengths: one key, odd ones, one shorter than a key block
// (64), exactly a block, and longer ones that end in a partial block.
const std::vector<int64_t> kLengths = {1, 37, 64, 129, 250};

// The bound on the error for outputs of size ~1: float32 arithmetic, or a
// bf16 output (one rounding, 2^-9 relative) from bf16-rounded weights.
double bound(Storage s) { return s == Storage::F32 ? 1e-5 : 1.2e-2; }

}  // namespace

TEST_CASE("attention kernel: every tier matches float64 attention") {
  for (Storage s : {Storage::F32, Storage::BF16})
    for (int64_t head_dim : {64, 16, 5}) {
      // Queries of spread 3: scaled scores of spread ~3, so the softmax is
      // peaked and its maximum moves between key blocks.
      const Problem problem(s, 3, head_dim, kLengths, 3.0f);
      const float scale = 1.0f / std::sqrt(float(head_dim));
      const std::vector<double> want = problem.reference(scale);
      for (Isa isa : test::supported_tiers())
        for (int64_t chunk : {int64_t(45), int64_t(512)}) {
          const std::string tier = isa_name(isa), storage = s == Storage::F32 ? "f32" : "bf16";
          CAPTURE(tier);
          CAPTURE(storage);
          CAPTURE(head_dim);
          CAPTURE(chunk);
          const std::vector<float> got = problem.run(chunk, scale, [&](const AttentionTensors& t, const AttentionBlock& b) {
            attend_block(s, t, b, scale, isa);
          });
          CHECK(max_error(got, want) <= bound(s));
          // As accurate as the unfused float32 way (a float32 score matrix,
          // softmax_rows, a float32 product with the values): both errors
          // come mostly from rounding the scores, so they are of one size
          // but not equal; the mean is compared, the steadier of the two.
          if (s == Storage::F32) {
            const std::vector<float> unfused = problem.unfused(scale, isa);
            CHECK(mean_error(got, want) <= 1.1 * mean_error(unfused, want));
          }
        }
      }
}

TEST_CASE("attention kernel: the avx512 tier's float32 version also runs bf16 (CPUs without AVX512-BF16)") {
  if (!isa_supported(Isa::Avx512)) return;
  const Problem problem(Storage::BF16, 2, 64, kLengths, 3.0f);
  const float scale = 0.125f;
  const std::vector<float> got = problem.run(100, scale, [&](const AttentionTensors& t, const AttentionBlock& b) {
    attention_detail::attend_avx512(Storage::BF16, attention_detail::make_job(Storage::BF16, t, b, scale));
  });
  // Weights in float32 here: only the output's rounding is left.
  CHECK(max_error(got, problem.reference(scale)) <= 1e-2);
}

TEST_CASE("attention kernel: a block outside the tensors, or a tier this CPU cannot run, is refused") {
  float q[8] = {}, k[8] = {}, v[8] = {}, out[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const AttentionTensors t{q, k, v, out, 2, 2, 2};  // 2 tokens, 2 heads, head_dim 2
  CHECK_THROWS_AS(attend_block(Storage::F32, t, {2, 0, 2, 0, 2}, 1.0f), Error);  // head 2 of 2
  CHECK_THROWS_AS(attend_block(Storage::F32, t, {0, 1, 2, 0, 2}, 1.0f), Error);  // tokens 1..3 of 2
  CHECK_THROWS_AS(attend_block(Storage::F32, t, {0, 0, 2, 1, 2}, 1.0f), Error);  // queries 1..3 of 2
  Isa missing = Isa::Generic;
  for (Isa isa : test::kAllTiers)
    if (!isa_supported(isa)) missing = isa;
  REQUIRE(missing != Isa::Generic);
  CHECK_THROWS_AS(attend_block(Storage::F32, t, {0, 0, 2, 0, 2}, 1.0f, missing), Error);
  CHECK(out[0] == 1.0f);  // refused before touching anything
}
