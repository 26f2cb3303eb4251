// The fused attention kernel (kernels/attention.h) against attention computed
// here in float64 from the same stored values: every tier this CPU runs, f32
// and bf16 storage, several images of different lengths (odd ones, one
// shorter than a key block, one key), blocks of queries that are not whole
// tiles, and scores large enough that the running maximum moves from key
// block to key block; then int8 scores (AttentionScores::Int8) against the
// attention of q and k quantized here, and their score kernels against exact
// integer dot products. Runs without torch, in the sanitizer stage too.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
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
  std::vector<double> reference(float scale) const { return reference(scale, q, k); }
  // The same with other queries and keys (such as q and k quantized).
  template <class F>
  std::vector<double> reference(float scale, const std::vector<F>& q, const std::vector<F>& k) const {
    std::vector<double> out(size_t(tokens * heads * head_dim));
    int64_t start = 0;
    for (int64_t length : lengths) {
      for (int64_t h = 0; h < heads; ++h) {
        const auto at = [&](const auto& x, int64_t token, int64_t d) {
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
  std::vector<float> run(int64_t chunk, float scale, Attend attend,
                         AttentionScores scores = AttentionScores::Float) const {
    std::vector<float> out(size_t(tokens * heads * head_dim), NAN);
    std::vector<uint16_t> out16(out.size(), 0x7fc0);  // a bf16 NaN
    void* out_ptr = storage == Storage::F32 ? static_cast<void*>(out.data()) : out16.data();
    const AttentionTensors t{ptr(q, q16), ptr(k, k16), ptr(v, v16), out_ptr, tokens, heads, head_dim, scores};
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

// Rows of `dim` values quantized for int8 scores as attention.h defines it,
// written out here: scale = max|x| / 127 in float, value = x · (127 /
// max|x|) rounded to the nearest integer (ties to even), 0 for a row of
// zeros, -127 for a NaN (which max|x| skips).
struct QuantizedRows {
  std::vector<int8_t> values;  // row-major, `dim` per row
  std::vector<float> scales;
};
QuantizedRows quantize_rows(const std::vector<float>& x, int64_t dim) {
  QuantizedRows out;
  const size_t rows = x.size() / size_t(dim);
  out.values.resize(x.size());
  for (size_t r = 0; r < rows; ++r) {
    float max_abs = 0;
    for (int64_t d = 0; d < dim; ++d) max_abs = std::max(max_abs, std::fabs(x[r * size_t(dim) + size_t(d)]));  // skips NaN
    out.scales.push_back(max_abs / 127.0f);
    for (int64_t d = 0; d < dim; ++d) {
      const size_t i = r * size_t(dim) + size_t(d);
      const float level = std::nearbyint(x[i] * (127.0f / max_abs));
      out.values[i] = max_abs == 0 ? 0 : std::isnan(level) ? -127 : int8_t(std::clamp(level, -127.0f, 127.0f));
    }
  }
  return out;
}
// value · scale per element, in float64.
std::vector<double> dequantized(const QuantizedRows& rows, int64_t dim) {
  std::vector<double> out(rows.values.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = double(rows.values[i]) * double(rows.scales[i / size_t(dim)]);
  return out;
}

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

#if QVL_X86  // the avx512 tier's entry points exist only in x86 builds
TEST_CASE("attention kernel: the avx512 tier's float32 version also runs bf16 (CPUs without AVX512-BF16)") {
  if (!isa_supported(Isa::Avx512)) return;
  const Problem problem(Storage::BF16, 2, 64, kLengths, 3.0f);
  const float scale = 0.125f;
  const std::vector<float> got = problem.run(100, scale, [&](const AttentionTensors& t, const AttentionBlock& b) {
    attention_detail::attend_avx512(attention_detail::make_job(Storage::BF16, t, b, scale));
  });
  // Weights in float32 here: only the output's rounding is left.
  CHECK(max_error(got, problem.reference(scale)) <= 1e-2);
}
#endif

// int8 scores (AttentionScores::Int8): the attention of q and k as quantized
// per row, to float32 precision (the scores are exact integers times the
// scales, each product rounded once), on every tier. Also a row of zeros
// among the keys and among the queries (scale 0).
TEST_CASE("attention kernel: int8 scores are the attention of q and k quantized per row, on every tier") {
  for (Storage s : {Storage::F32, Storage::BF16})
    for (int64_t head_dim : {64, 16, 5}) {
      Problem problem(s, 3, head_dim, kLengths, 3.0f);
      for (std::vector<float>* x : {&problem.q, &problem.k}) {
        const size_t row = size_t((1 * problem.tokens + 40) * head_dim);  // head 1, token 40
        std::fill(x->begin() + long(row), x->begin() + long(row) + head_dim, 0.0f);
      }
      if (s == Storage::BF16) problem.q16 = test::to_bf16(problem.q), problem.k16 = test::to_bf16(problem.k);
      const float scale = 1.0f / std::sqrt(float(head_dim));
      const std::vector<double> want = problem.reference(
          scale, dequantized(quantize_rows(problem.q, head_dim), head_dim),
          dequantized(quantize_rows(problem.k, head_dim), head_dim));
      const std::vector<double> want_float = problem.reference(scale);
      for (Isa isa : test::supported_tiers())
        for (int64_t chunk : {int64_t(45), int64_t(512)}) {
          const std::string tier = isa_name(isa), storage = s == Storage::F32 ? "f32" : "bf16";
          CAPTURE(tier);
          CAPTURE(storage);
          CAPTURE(head_dim);
          CAPTURE(chunk);
          const std::vector<float> got = problem.run(
              chunk, scale, [&](const AttentionTensors& t, const AttentionBlock& b) { attend_block(s, t, b, scale, isa); },
              AttentionScores::Int8);
          CHECK(max_error(got, want) <= bound(s));
          // What quantizing q and k does to the output. Here (queries of
          // spread 3, keys of 1, head_dim 64) each value moves by up to half a
          // step of max|x| / 127, i.e. ~0.03 for q and ~0.01 for k, so a
          // scaled score (spread ~3) by ~0.025 (std), and an output by about
          // that times the values' spread (1): the largest of the ~10^4
          // outputs measured 0.13 (f32, head_dim 64), 0.04-0.08 otherwise.
          // Far above float32's own error, so the int8 scores are the ones
          // in use.
          const double quantization_error = max_error(got, want_float);
          if (isa == test::supported_tiers().back() && chunk == 512)
            MESSAGE(storage << " head_dim " << head_dim << ": int8 scores vs float attention, max error "
                            << quantization_error);
          CHECK(quantization_error <= 0.2);
          if (s == Storage::F32) CHECK(quantization_error > 100 * bound(s));
        }
    }
}

TEST_CASE("attention kernel: int8 scores are the exact integer dot products times both scales, the same floats on every tier") {
  // (1100: more dims than the portable code sums exactly in float at once.)
  for (int64_t head_dim : {64, 5, 1100}) {
    CAPTURE(head_dim);
    const int64_t tokens = 46, queries = 32;
    std::vector<float> q = test::normal_values(tokens * head_dim, 21, 3.0f), k = test::normal_values(tokens * head_dim, 22);
    // Rows that quantize to ±127 in every dim: the largest products (for
    // vpmaddubsw, pairs of 2 · 127 · 127, just below its int16 saturation),
    // of both signs, and rows of zeros.
    for (int64_t d = 0; d < head_dim; ++d) {
      k[size_t(3 * head_dim + d)] = 1.0f;
      k[size_t(4 * head_dim + d)] = -2.0f;
      k[size_t(5 * head_dim + d)] = d % 2 ? 0.5f : -0.5f;
      k[size_t(6 * head_dim + d)] = 0.0f;
      q[size_t(0 * head_dim + d)] = -1.0f;
      q[size_t(1 * head_dim + d)] = 3.0f;
      q[size_t(2 * head_dim + d)] = d % 2 ? -1.0f : 1.0f;
      q[size_t(3 * head_dim + d)] = 0.0f;
    }
    // A NaN (the row keeps its other values; the NaN becomes -127).
    k[size_t(7 * head_dim + head_dim - 1)] = NAN;
    std::vector<float> out(size_t(tokens * head_dim));
    const AttentionTensors t{q.data(), k.data(), k.data(), out.data(), tokens, 1, head_dim, AttentionScores::Int8};
    const attention_detail::Job job =
        attention_detail::make_job(Storage::F32, t, AttentionBlock{0, 0, tokens, 0, queries}, 1.0f);
    const QuantizedRows qq = quantize_rows(q, head_dim), kq = quantize_rows(k, head_dim);

    // Every tier's quantization is the one written out above.
    std::vector<std::pair<std::string, attention_detail::QuantizeRows>> quantizers = {
        {"portable", attention_detail::quantize_rows_portable}};
#if QVL_X86
    if (isa_supported(Isa::Avx2)) quantizers.push_back({"avx2", attention_detail::quantize_rows_avx2});
    if (isa_supported(Isa::Avx512) && cpu_features().avx512_vnni)
      quantizers.push_back({"avx512", attention_detail::quantize_rows_avx512});
#endif
    // (bf16 storage too: the same values rounded to bf16.)
    std::vector<uint16_t> q16 = test::to_bf16(q), k16 = test::to_bf16(k);
    std::vector<float> k_rounded(k.size());
    for (size_t i = 0; i < k.size(); ++i) k_rounded[i] = bf16_to_float(k16[i]);
    const AttentionTensors t16{q16.data(), k16.data(), k16.data(), out.data(), tokens, 1, head_dim, AttentionScores::Int8};
    const QuantizedRows kq16 = quantize_rows(k_rounded, head_dim);
    for (const auto& [name, quantize] : quantizers)
      for (Storage storage : {Storage::F32, Storage::BF16}) {
        CAPTURE(name);
        CAPTURE(int(storage));
        const QuantizedRows& want_keys = storage == Storage::F32 ? kq : kq16;
        const attention_detail::Int8Operands op = attention_detail::prepare_int8_scores(
            attention_detail::make_job(storage, storage == Storage::F32 ? t : t16, AttentionBlock{0, 0, tokens, 0, queries}, 1.0f),
            queries, quantize);
        const int64_t padded = op.keys.padded_dim;
        CHECK(padded == (head_dim + 3) / 4 * 4);
        bool same_keys = true;
        for (int64_t j = 0; j < tokens; ++j) {
          int32_t sum = 0;
          for (int64_t d = 0; d < padded; ++d) {
            const int8_t want = d < head_dim ? want_keys.values[size_t(j * head_dim + d)] : 0;
            same_keys = same_keys && op.keys.values[j * padded + d] == want;
            sum += want;
          }
          same_keys = same_keys && op.keys.scales[j] == want_keys.scales[size_t(j)] && op.keys.sums[j] == sum;
        }
        CHECK(same_keys);
      }

    // score[j][i] = float(Σ q_i·k_j) · (q_scale_i · k_scale_j), of keys 3.. (a
    // first key other than 0, and a count that leaves every kernel a tail).
    const int64_t first = 3, keys = tokens - first;
    std::vector<float> want(size_t(keys * queries));
    for (int64_t j = 0; j < keys; ++j)
      for (int64_t i = 0; i < queries; ++i) {
        int64_t dot = 0;
        for (int64_t d = 0; d < head_dim; ++d)
          dot += int64_t(qq.values[size_t(i * head_dim + d)]) * kq.values[size_t((first + j) * head_dim + d)];
        want[size_t(j * queries + i)] = float(dot) * (qq.scales[size_t(i)] * kq.scales[size_t(first + j)]);
      }
    CHECK(want[size_t((4 - first) * queries + 1)] == float(head_dim * -127 * 127) * (qq.scales[1] * kq.scales[4]));

    struct Scorer {
      std::string name;
      int tile;
      std::function<void(const attention_detail::Int8Operands&, float*)> score;
    };
    std::vector<Scorer> scorers;
    for (int tile : {8, 16, 32})
      scorers.push_back({"portable", tile, [&, tile](const attention_detail::Int8Operands& o, float* s) {
                           attention_detail::score_int8_portable(o, first, keys, tile, s);
                         }});
#if QVL_X86
    if (isa_supported(Isa::Avx2))
      scorers.push_back({"avx2", 16, [&](const attention_detail::Int8Operands& o, float* s) {
                           attention_detail::score_int8_avx2(o, first, keys, s);
                         }});
    if (isa_supported(Isa::Avx512) && cpu_features().avx512_vnni)
      scorers.push_back({"avx512_vnni", 32, [&](const attention_detail::Int8Operands& o, float* s) {
                           attention_detail::score_int8_avx512_vnni(o, first, keys, s);
                         }});
    // The avx2-vnni tier's, in each encoding this CPU can run.
    if (cpu_features().avx_vnni)
      scorers.push_back({"avx_vnni", 16, [&](const attention_detail::Int8Operands& o, float* s) {
                           attention_detail::score_int8_avx_vnni(o, first, keys, s);
                         }});
    if (cpu_features().avx512vl && cpu_features().avx512_vnni)
      scorers.push_back({"avx_vnni_evex", 16, [&](const attention_detail::Int8Operands& o, float* s) {
                           attention_detail::score_int8_avx_vnni_evex(o, first, keys, s);
                         }});
#endif
#if defined(__aarch64__)
    if (cpu_features().neon_dotprod)
      scorers.push_back({"neon_dotprod", 8, [&](const attention_detail::Int8Operands& o, float* s) {
                           attention_detail::score_int8_neon_dotprod(o, first, keys, s);
                         }});
#endif
    for (const Scorer& scorer : scorers) {
      CAPTURE(scorer.name);
      CAPTURE(scorer.tile);
      const attention_detail::Int8Operands tiled =
          attention_detail::prepare_int8_scores(job, scorer.tile, attention_detail::quantize_rows_portable);
      std::vector<float> got(want.size(), NAN), s(size_t(keys * scorer.tile));
      for (int64_t i0 = 0; i0 < queries; i0 += scorer.tile) {
        attention_detail::pack_query_tile_int8(tiled, i0, std::min<int64_t>(scorer.tile, queries - i0), scorer.tile);
        scorer.score(tiled, s.data());
        for (int64_t j = 0; j < keys; ++j)
          for (int64_t i = i0; i < std::min<int64_t>(i0 + scorer.tile, queries); ++i)
            got[size_t(j * queries + i)] = s[size_t(j * scorer.tile + i - i0)];
      }
      CHECK(test::same_bits(got, want));
    }
  }
}

#if QVL_X86
TEST_CASE("attention kernel: int8 scores in the avx512 tier's float32 version (CPUs without AVX512-BF16)") {
  if (!isa_supported(Isa::Avx512) || !cpu_features().avx512_vnni) return;
  const Problem problem(Storage::BF16, 2, 64, kLengths, 3.0f);
  const float scale = 0.125f;
  const std::vector<float> got = problem.run(
      100, scale,
      [&](const AttentionTensors& t, const AttentionBlock& b) {
        attention_detail::attend_avx512(attention_detail::make_job(Storage::BF16, t, b, scale));
      },
      AttentionScores::Int8);
  const std::vector<double> want =
      problem.reference(scale, dequantized(quantize_rows(problem.q, 64), 64), dequantized(quantize_rows(problem.k, 64), 64));
  CHECK(max_error(got, want) <= 1e-2);  // weights in float32: only the output's rounding is left
}
#endif

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
