// What the element-wise kernels (kernels/decode_ops.h, kernels/vision_ops.h)
// promise without a reference library: the avx2 and avx512 tiers give the
// same bits (they evaluate every lane with the same operations in the same
// order), every tier sums the norms in the one order it is given, and a tier
// this CPU cannot run is refused before anything is touched. Their agreement
// with ATen is checked in the model suite (tests/model/test_decode_ops.cpp,
// test_kernels_vision.cpp); these run without torch, in the sanitizer stage too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/error.h"
#include "qvl/kernels/decode_ops.h"
#include "qvl/kernels/decode_ops_detail.h"
#include "qvl/kernels/vision_ops.h"

using namespace qvl;
using namespace qvl::kernels;

namespace {

// Values in one of the two activation storages.
struct Activations {
  Storage storage;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  Activations(Storage s, const std::vector<float>& values) : storage(s) {
    if (s == Storage::F32)
      f32 = values;
    else
      bf16 = test::to_bf16(values);
  }
  void* data() { return storage == Storage::F32 ? static_cast<void*>(f32.data()) : bf16.data(); }
  const void* data() const { return storage == Storage::F32 ? static_cast<const void*>(f32.data()) : bf16.data(); }
  bool operator==(const Activations& other) const {
    return storage == other.storage && test::same_bits(f32, other.f32) && test::same_bits(bf16, other.bf16);
  }
};

constexpr Storage kStorages[] = {Storage::F32, Storage::BF16};
const char* name_of(Storage s) { return s == Storage::F32 ? "f32" : "bf16"; }

bool both_x86_tiers() { return isa_supported(Isa::Avx2) && isa_supported(Isa::Avx512); }

// `n` values of size `spread` around `mean`, as a real decoder or tower sees them.
std::vector<float> values(int64_t n, uint64_t seed, float spread = 1.0f, float mean = 0.1f) {
  return test::normal_values(n, seed, spread, mean);
}

// A tier this CPU cannot run: neon on x86, the x86 tiers on aarch64.
Isa missing_tier() {
  Isa missing = Isa::Generic;
  for (Isa isa : test::kAllTiers)
    if (!isa_supported(isa)) missing = isa;
  return missing;
}

// One sequence's cache, [kv_heads, capacity, head_dim], NaN past `visible`
// so that reading a position not asked for shows in the output.
struct TestCache {
  Activations keys, values;
  int64_t visible;
};
TestCache make_cache(Storage s, int64_t kv_heads, int64_t capacity, int64_t head_dim, int64_t visible, uint64_t seed) {
  std::vector<float> keys(size_t(kv_heads * capacity * head_dim), NAN), vals = keys;
  const std::vector<float> k = values(kv_heads * visible * head_dim, seed, 1.5f, 0.0f);
  const std::vector<float> v = values(kv_heads * visible * head_dim, seed + 1, 1.0f, 0.2f);
  for (int64_t g = 0; g < kv_heads; ++g)
    for (int64_t i = 0; i < visible * head_dim; ++i) {
      keys[size_t(g * capacity * head_dim + i)] = k[size_t(g * visible * head_dim + i)];
      vals[size_t(g * capacity * head_dim + i)] = v[size_t(g * visible * head_dim + i)];
    }
  return {Activations(s, keys), Activations(s, vals), visible};
}

}  // namespace

TEST_CASE("vision kernels: the avx2 and avx512 tiers give the same bits") {
  // The row sums as 16 lanes (two 8-lane halves on avx2) reduced in the same
  // order, the same exponential: nothing may differ.
  if (!both_x86_tiers()) return;
  for (Storage s : kStorages)
    for (int64_t cols : {1280, 1024 + 13, 7}) {
      CAPTURE(name_of(s));
      CAPTURE(cols);
      const int64_t rows = 19;
      const Activations x(s, values(rows * cols, 5, 3.0f, 0.5f)), add(s, values(rows * cols, 6));
      const std::vector<float> gamma = values(cols, 7), beta = values(cols, 8);
      Activations xa = x, xb = x, ya = x, yb = x;
      add_layer_norm(s, xa.data(), add.data(), ya.data(), gamma.data(), beta.data(), rows, cols, 1e-6f, Isa::Avx2);
      add_layer_norm(s, xb.data(), add.data(), yb.data(), gamma.data(), beta.data(), rows, cols, 1e-6f, Isa::Avx512);
      CHECK(xa == xb);
      CHECK(ya == yb);

      Activations ga(s, values(rows * cols, 9, 4.0f)), gb = ga;
      gelu_tanh(s, ga.data(), rows * cols, Isa::Avx2);
      gelu_tanh(s, gb.data(), rows * cols, Isa::Avx512);
      CHECK(ga == gb);

      Activations sa(s, values(rows * cols, 10, 10.0f)), sb = sa;
      softmax_rows(s, sa.data(), rows, cols, 0.125f, Isa::Avx2);
      softmax_rows(s, sb.data(), rows, cols, 0.125f, Isa::Avx512);
      CHECK(sa == sb);

      const int64_t heads = 2, head_dim = cols % 2 == 0 ? cols / 2 : 6, tokens = rows;
      const Activations qkv(s, values(tokens * 3 * heads * head_dim, 11));
      std::vector<float> cos(size_t(tokens * head_dim)), sin = cos;
      const std::vector<float> angles = values(tokens * head_dim, 12, 20.0f);
      for (size_t i = 0; i < cos.size(); ++i) cos[i] = std::cos(angles[i]), sin[i] = std::sin(angles[i]);
      std::vector<Activations> outs;
      for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
        const std::vector<float> empty(size_t(3 * heads * tokens * head_dim), 0.0f);
        Activations qkv_out(s, empty);
        char* base = static_cast<char*>(qkv_out.data());
        const size_t part = size_t(heads * tokens * head_dim) * (s == Storage::F32 ? 4 : 2);
        split_qkv_rotary(s, qkv.data(), cos.data(), sin.data(), tokens, heads, head_dim, base, base + part,
                         base + 2 * part, isa);
        outs.push_back(qkv_out);
      }
      CHECK(outs[0] == outs[1]);
    }
}

TEST_CASE("vision kernels: a tier this CPU cannot run is refused") {
  const Isa missing = missing_tier();
  REQUIRE(missing != Isa::Generic);
  float x[4] = {1, 2, 3, 4}, y[4] = {}, gamma[4] = {1, 1, 1, 1}, beta[4] = {};
  float qkv[12] = {}, table[2] = {1, 0}, q[4], k[4], v[4];
  CHECK_THROWS_AS(gelu_tanh(Storage::F32, x, 4, missing), Error);
  CHECK_THROWS_AS(softmax_rows(Storage::F32, x, 1, 4, 1.0f, missing), Error);
  CHECK_THROWS_AS(add_layer_norm(Storage::F32, x, nullptr, y, gamma, beta, 1, 4, 1e-6f, missing), Error);
  CHECK_THROWS_AS(split_qkv_rotary(Storage::F32, qkv, table, table, 1, 2, 2, q, k, v, missing), Error);
  CHECK(x[0] == 1.0f);  // refused before touching anything
}

TEST_CASE("decode ops: the norms' sum order for every ATen vector width is the same on every tier") {
  // The model suite checks the width this ATen uses against ATen itself; the
  // other widths cannot be checked against this ATen, but every tier must
  // agree with the portable code on them, bit for bit.
  const decode_detail::DecodeKernels& portable = decode_detail::decode_kernels(Isa::Generic, "test");
  for (Isa isa : test::supported_tiers())
    for (int lanes : {1, 8, 16})
      for (Storage s : kStorages)
        for (int64_t cols : {2048, 6144, 128, 1000, 37, 9}) {
          CAPTURE(isa_name(isa));
          CAPTURE(lanes);
          CAPTURE(name_of(s));
          CAPTURE(cols);
          const int64_t rows = 3;
          const Activations x(s, values(rows * cols, 19 + cols, 4.0f));
          const Activations weight(s, values(cols, 20 + cols, 1.0f, 1.0f));
          Activations a = x, b = x;
          decode_detail::NormJob job{s, x.data(), weight.data(), a.data(), cols, 1e-6f, lanes};
          portable.rms_norm_rows(job, 0, rows);
          job.y = b.data();
          decode_detail::decode_kernels(isa, "test").rms_norm_rows(job, 0, rows);
          CHECK(a == b);

          // The per-head norm sums the same way: each row's first head_dim
          // values as one token's heads (all rotated by the one table row).
          const int64_t head_dim = cols / 2 * 2;
          if (head_dim > 256 || head_dim < 2) continue;
          const std::vector<float> angles = values(head_dim, 21, 100.0f);
          std::vector<float> cos(angles.size()), sin(angles.size());
          for (size_t i = 0; i < angles.size(); ++i) cos[i] = std::cos(angles[i]), sin[i] = std::sin(angles[i]);
          std::vector<float> first(size_t(rows * head_dim));
          const std::vector<float> all = values(rows * cols, 19 + cols, 4.0f);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t d = 0; d < head_dim; ++d) first[size_t(r * head_dim + d)] = all[size_t(r * cols + d)];
          const Activations heads(s, first);
          Activations c = heads, d = heads;
          decode_detail::HeadRopeJob rope{s, heads.data(), weight.data(), cos.data(), sin.data(), c.data(),
                                          rows, head_dim, 1e-6f, lanes};
          portable.head_norm_rope_rows(rope, 0, rows);
          rope.y = d.data();
          decode_detail::decode_kernels(isa, "test").head_norm_rope_rows(rope, 0, rows);
          CHECK(c == d);
        }
}

TEST_CASE("decode ops: the avx2 and avx512 tiers give the same bits") {
  // Both evaluate every lane with the same operations in the same order (the
  // 16-lane dot products and sums as two 8-lane halves on avx2), so their
  // attention and SiLU must agree exactly, on the Qwen3-VL shape and on the
  // shapes the specialized code does not cover.
  if (!both_x86_tiers()) return;
  struct Shape {
    int64_t heads, kv_heads, head_dim;
  };
  for (Storage s : kStorages)
    for (const Shape& shape : {Shape{16, 8, 128}, Shape{8, 1, 40}, Shape{6, 2, 128}, Shape{3, 3, 17}}) {
      CAPTURE(name_of(s));
      CAPTURE(shape.heads);
      CAPTURE(shape.head_dim);
      const AttentionShape attention{shape.heads, shape.kv_heads, shape.head_dim};
      std::vector<TestCache> caches;
      for (int64_t visible : {300, 1000, 31})
        caches.push_back(make_cache(s, shape.kv_heads, 1024, shape.head_dim, visible, 100 + visible));
      std::vector<KvSequence> sequences;
      for (size_t b = 0; b < caches.size(); ++b)
        sequences.push_back({caches[b].keys.data(), caches[b].values.data(), 1024, caches[b].visible});
      const Activations q(s, values(3 * shape.heads * shape.head_dim, 16));
      Activations a(s, std::vector<float>(size_t(3 * shape.heads * shape.head_dim), 0.0f)), b = a;
      decode_attention(s, q.data(), sequences.data(), 3, attention, a.data(), Isa::Avx2);
      decode_attention(s, q.data(), sequences.data(), 3, attention, b.data(), Isa::Avx512);
      CHECK(a == b);
      // A prefill's causal attention (the avx512 tier takes two queries at a
      // time on the Qwen3-VL shape): 7 queries, an odd count, after 293.
      const Activations prefill_q(s, values(7 * shape.heads * shape.head_dim, 19));
      Activations pa(s, std::vector<float>(size_t(7 * shape.heads * shape.head_dim), 0.0f)), pb = pa;
      causal_attention(s, prefill_q.data(), sequences[0], 7, attention, pa.data(), Isa::Avx2);
      causal_attention(s, prefill_q.data(), sequences[0], 7, attention, pb.data(), Isa::Avx512);
      CHECK(pa == pb);
    }
  for (Storage s : kStorages) {
    // Far past where e^-g is clamped, both signs of zero, and a partial vector.
    std::vector<float> gate_values = values(3 * (6144 + 7), 17, 3.0f);
    for (float e : {-200.0f, -88.5f, -87.0f, -0.0f, 0.0f, 87.5f, 88.0f, 89.0f, 200.0f}) gate_values.push_back(e);
    const int64_t n = int64_t(gate_values.size());
    const Activations gate(s, gate_values), up(s, values(n, 18));
    Activations ga = gate, gb = gate;
    silu_mul(s, ga.data(), up.data(), n, Isa::Avx2);
    silu_mul(s, gb.data(), up.data(), n, Isa::Avx512);
    CHECK(ga == gb);
  }
}

TEST_CASE("decode ops: a tier this CPU cannot run, or a sum width that is not ATen's, is refused") {
  const Isa missing = missing_tier();
  REQUIRE(missing != Isa::Generic);
  std::vector<float> x(16, 1.0f), w(8, 1.0f), y(16, 0.0f), table(16, 0.0f);
  CHECK_THROWS_AS(rms_norm_rows(Storage::F32, x.data(), w.data(), y.data(), 2, 8, 1e-6, 16, missing), Error);
  CHECK_THROWS_AS(head_norm_rope(Storage::F32, x.data(), w.data(), table.data(), table.data(), y.data(), 2, 1, 8,
                                 1e-6, 16, missing),
                  Error);
  std::vector<float> cache(32, 0.0f);
  const KvSequence seq{cache.data(), cache.data(), 4, 4};
  CHECK_THROWS_AS(decode_attention(Storage::F32, x.data(), &seq, 1, {1, 1, 8}, y.data(), missing), Error);
  CHECK_THROWS_AS(silu_mul(Storage::F32, x.data(), w.data(), 8, missing), Error);
  for (int lanes : {0, 4, 32})
    CHECK_THROWS_WITH_AS(rms_norm_rows(Storage::F32, x.data(), w.data(), y.data(), 2, 8, 1e-6, lanes),
                         doctest::Contains("lanes"), Error);
  CHECK(x == std::vector<float>(16, 1.0f));  // refused before touching anything
  CHECK(y == std::vector<float>(16, 0.0f));
}

TEST_CASE("cpu tiers: avx2-vnni is avx2 plus a 256-bit vpdpbusd, and runs the avx2 tier's element-wise code") {
  // Names are distinct, so QVL_ISA picks exactly one tier.
  for (Isa a : test::kAllTiers)
    for (Isa b : test::kAllTiers)
      if (a != b) CHECK(std::string(isa_name(a)) != isa_name(b));
  CHECK(std::string(isa_name(Isa::Avx2Vnni)) == "avx2-vnni");
  CHECK(runs_avx2_code(Isa::Avx2));
  CHECK(runs_avx2_code(Isa::Avx2Vnni));
  CHECK_FALSE(runs_avx2_code(Isa::Avx512));
  CHECK_FALSE(runs_avx2_code(Isa::Generic));

  // Supported exactly where AVX2 is and one encoding of the instruction.
  const CpuFeatures& f = cpu_features();
  const bool has_vpdpbusd_256 = f.avx_vnni || (f.avx512vl && f.avx512_vnni);
  CHECK(isa_supported(Isa::Avx2Vnni) == (isa_supported(Isa::Avx2) && has_vpdpbusd_256));
  // The best tier prefers it to avx2, and avx512 to it.
  if (isa_supported(Isa::Avx512))
    CHECK(best_isa() == Isa::Avx512);
  else if (isa_supported(Isa::Avx2Vnni))
    CHECK(best_isa() == Isa::Avx2Vnni);
  if (!isa_supported(Isa::Avx2Vnni)) return;
  // Outside the int8 products it is the avx2 tier: the same kernel tables.
  CHECK(&decode_detail::decode_kernels(Isa::Avx2Vnni, "test") == &decode_detail::decode_kernels(Isa::Avx2, "test"));
}
