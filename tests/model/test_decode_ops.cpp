// The decode kernels (kernels/decode_ops.h) against the ATen formulation the
// decoder used before them (layer.cpp's rms_norm and attend_block, rope.cpp's
// apply_rope, restated here so the tests keep their meaning once the decoder
// calls the kernels), on every tier this CPU runs (kernels/cpu.h), float32 and
// bfloat16, with sizes that leave partial vectors. Norms and rotary must give
// ATen's bits on every tier; attention and SiLU use
// their own summation order or exponential and get a tolerance derived below.
// That the avx2 and avx512 tiers agree bit for bit, and every tier sums the
// norms in the order it is given, is checked without torch in the unit suite
// (tests/unit/test_kernels_tiers.cpp).
#include <algorithm>
#include <string>
#include <cmath>
#include <vector>

#include "qvl/decoder/rope.h"
#include "qvl/error.h"
#include "qvl/kernels/cpu.h"
#include "qvl/kernels/decode_ops.h"
#include "qvl/model/config.h"
#include "qvl/tensor/aten_sum_order.h"
#include "torch_test_support.h"

using namespace qvl;
using namespace qvl::kernels;

namespace {

constexpr Isa kAllTiers[] = {Isa::Generic, Isa::Neon, Isa::Avx2, Isa::Avx512};

std::vector<Isa> tiers_here() {
  std::vector<Isa> tiers;
  for (Isa isa : kAllTiers)
    if (isa_supported(isa)) tiers.push_back(isa);
  return tiers;
}
const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16};
Storage storage_of(at::ScalarType t) { return t == at::kFloat ? Storage::F32 : Storage::BF16; }
// The vector width of this ATen's float sum, which the norms reproduce.
const int kLanes = tensor::aten_sum_lanes();

// layer.cpp's rms_norm and rope.cpp's apply_rope as they were before the kernels.
at::Tensor aten_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor inv_rms = at::rsqrt(xf.square().mean(-1, /*keepdim=*/true).add_(eps));
  return (xf * inv_rms).to(x.scalar_type()) * weight;
}
at::Tensor aten_rope(const at::Tensor& x, const at::Tensor& cos_table, const at::Tensor& sin_table) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor cos = cos_table.unsqueeze(1), sin = sin_table.unsqueeze(1);
  at::Tensor rotated = at::cat({-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)}, -1);
  return (xf * cos + rotated * sin).to(x.scalar_type());
}

// Activations of the size a real decoder sees (RMS-normed inputs are O(1),
// the residual stream has outliers in the tens).
at::Tensor activations(at::IntArrayRef sizes, at::ScalarType dtype, double spread = 1.0) {
  return (at::randn(sizes) * spread + 0.1).to(dtype);
}

}  // namespace

TEST_CASE("decode ops: rms_norm_rows gives layer.cpp's rms_norm bit for bit") {
  at::manual_seed(11);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t cols : {2048, 128, 6144, 1000, 37, 9, 5})
        for (int64_t rows : {1, 3, 8}) {
          const std::string tier = isa_name(isa);
          CAPTURE(tier);
          const std::string dtype_name = c10::toString(dtype);
          CAPTURE(dtype_name);
          CAPTURE(cols);
          CAPTURE(rows);
          at::Tensor x = activations({rows, cols}, dtype, 4.0);
          at::Tensor weight = (at::rand({cols}) * 2).to(at::kBFloat16).to(dtype);  // bf16 values, as checkpoints hold
          at::Tensor y = at::empty_like(x);
          rms_norm_rows(storage_of(dtype), x.data_ptr(), weight.data_ptr(), y.data_ptr(), rows, cols, 1e-6, kLanes, isa);
          CHECK(at::equal(y, aten_rms_norm(x, weight, 1e-6)));

          at::Tensor in_place = x.clone();
          rms_norm_rows(storage_of(dtype), in_place.data_ptr(), weight.data_ptr(), in_place.data_ptr(), rows, cols,
                        1e-6, kLanes, isa);
          CHECK(at::equal(in_place, y));
        }
}

TEST_CASE("decode ops: head_norm_rope gives rope(rms_norm(q)) bit for bit, with the 2B model's MRoPE tables") {
  at::manual_seed(12);
  const TextConfig cfg = load_model_config(test::data_path("qwen3-vl-2b")).text;
  const MultimodalRope mrope(cfg);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t tokens : {1, 5, 8})
        for (int64_t heads : {cfg.num_attention_heads, cfg.num_key_value_heads, int64_t(3)}) {
          const std::string tier = isa_name(isa);
          CAPTURE(tier);
          const std::string dtype_name = c10::toString(dtype);
          CAPTURE(dtype_name);
          CAPTURE(tokens);
          CAPTURE(heads);
          const int64_t head_dim = cfg.head_dim;
          // Each sequence of a batch sits at its own position; image tokens differ per axis.
          const at::Tensor positions = at::randint(0, 4096, {3, tokens}, at::kLong);
          const RopeTables rope = mrope.tables(positions);
          at::Tensor x = activations({tokens, heads, head_dim}, dtype, 3.0);
          at::Tensor weight = (at::rand({head_dim}) * 2).to(at::kBFloat16).to(dtype);
          at::Tensor y = at::empty_like(x);
          head_norm_rope(storage_of(dtype), x.data_ptr(), weight.data_ptr(), rope.cos.data_ptr<float>(),
                         rope.sin.data_ptr<float>(), y.data_ptr(), tokens, heads, head_dim, cfg.rms_norm_eps,
                         kLanes, isa);
          const at::Tensor want = aten_rope(aten_rms_norm(x, weight, cfg.rms_norm_eps), rope.cos, rope.sin);
          CHECK(at::equal(y, want));

          head_norm_rope(storage_of(dtype), x.data_ptr(), weight.data_ptr(), rope.cos.data_ptr<float>(),
                         rope.sin.data_ptr<float>(), x.data_ptr(), tokens, heads, head_dim, cfg.rms_norm_eps,
                         kLanes, isa);
          CHECK(at::equal(x, want));  // in place
        }
}

TEST_CASE("decode ops: head_norm_rope on head sizes that leave partial vectors") {
  at::manual_seed(13);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t head_dim : {2, 6, 34, 66, 200}) {
        const std::string tier = isa_name(isa);
        CAPTURE(tier);
        const std::string dtype_name = c10::toString(dtype);
        CAPTURE(dtype_name);
        CAPTURE(head_dim);
        const int64_t tokens = 3, heads = 4;
        const at::Tensor angles = at::rand({tokens, head_dim / 2}) * 1000;
        const at::Tensor full = at::cat({angles, angles}, 1);
        const at::Tensor cos = full.cos(), sin = full.sin();
        at::Tensor x = activations({tokens, heads, head_dim}, dtype, 2.0);
        at::Tensor weight = (at::rand({head_dim}) * 2).to(at::kBFloat16).to(dtype);
        at::Tensor y = at::empty_like(x);
        head_norm_rope(storage_of(dtype), x.data_ptr(), weight.data_ptr(), cos.data_ptr<float>(),
                       sin.data_ptr<float>(), y.data_ptr(), tokens, heads, head_dim, 1e-6, kLanes, isa);
        CHECK(at::equal(y, aten_rope(aten_rms_norm(x, weight, 1e-6), cos, sin)));
      }
  CHECK_THROWS_AS(head_norm_rope(Storage::F32, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 5, 1e-6, kLanes),
                  qvl::Error);
}

namespace {

// One sequence's cache, [kv_heads, capacity, head_dim], NaN past `visible`
// so that reading a position not asked for shows in the output.
struct TestCache {
  at::Tensor keys, values;
  int64_t visible;
};

TestCache make_cache(int64_t kv_heads, int64_t capacity, int64_t head_dim, int64_t visible, at::ScalarType dtype) {
  at::Tensor keys = at::full({kv_heads, capacity, head_dim}, NAN).to(dtype);
  at::Tensor values = at::full({kv_heads, capacity, head_dim}, NAN).to(dtype);
  // Keys of normed-and-rotated size give peaked and flat score rows alike.
  keys.narrow(1, 0, visible).copy_(at::randn({kv_heads, visible, head_dim}) * 1.5);
  values.narrow(1, 0, visible).copy_(at::randn({kv_heads, visible, head_dim}) + 0.2);
  return {keys, values, visible};
}

// Error bound for one query row (derivation in the test case's comment).
struct Reference {
  at::Tensor out;             // [heads, head_dim] as ATen computes it, in the cache's dtype
  at::Tensor weighted_abs_v;  // Σ_t p_t·|v_t| per output value, float
  double score_error = 0;     // bound on |Δ score| between two float32 dot orders
};

// layer.cpp's attend_block for one query row (n = 1).
Reference aten_attention(const at::Tensor& q, const TestCache& c) {
  const int64_t heads = q.size(0), head_dim = q.size(1), kv_heads = c.keys.size(0);
  const int64_t group = heads / kv_heads;
  const at::Tensor keys = c.keys.narrow(1, 0, c.visible), values = c.values.narrow(1, 0, c.visible);
  const at::Tensor grouped = q.view({kv_heads, group, head_dim});
  at::Tensor scores = at::bmm(grouped.to(at::kFloat), keys.transpose(1, 2).to(at::kFloat));
  scores.mul_(1.0 / std::sqrt(static_cast<double>(head_dim)));
  const at::Tensor probs_float = at::softmax(scores, -1);
  const at::Tensor probs = probs_float.to(values.scalar_type());
  Reference r;
  // Σ p·v of the rounded probabilities in float32, rounded once: what the
  // kernels promise, and not what every libtorch's own bf16 bmm does (some
  // builds accumulate in bf16, some send it to a oneDNN that cannot run it).
  r.out = at::bmm(probs.to(at::kFloat), values.to(at::kFloat)).to(values.scalar_type()).reshape({heads, head_dim});
  r.weighted_abs_v = at::bmm(probs_float, values.to(at::kFloat).abs()).reshape({heads, head_dim});
  // Each float32 dot of head_dim products is within γ = head_dim·2^-24 (relative
  // to Σ|q·k|) of the exact value, so two summation orders differ by twice that.
  const at::Tensor abs_dots = at::bmm(grouped.to(at::kFloat).abs(), keys.transpose(1, 2).to(at::kFloat).abs());
  r.score_error = 2.0 * head_dim * std::ldexp(1.0, -24) * abs_dots.max().item<double>() / std::sqrt(double(head_dim));
  return r;
}

// One bf16 step at |v| (2^-7 relative to the leading power of two).
at::Tensor bf16_ulp(const at::Tensor& v) {
  return at::pow(2.0, at::floor(at::log2(v.abs().clamp_min(1e-30))) - 7);
}

}  // namespace

TEST_CASE("decode ops: decode_attention matches attend_block within the derived bound, batch 1..8") {
  // Why the two may differ, per output value o_i = Σ_t p_t·v_ti:
  //  * scores: float32 dots in another order, |Δs| ≤ ε_s (score_error above);
  //    a softmax moves each p_t by at most 2·ε_s relative (its own score and
  //    the normalizer). The exponential is a polynomial (measured over
  //    [-87, 88]: within 0.93 ulp with FMA on the vector tiers, 1.21 ulp
  //    without on the portable one) against ATen's 1-ulp one, and the
  //    normalizing sum of `visible` terms is ordered differently:
  //    (10 + 2·visible)·2^-24 relative covers both.
  //    (The portable tier multiplies and adds separately where the vector
  //    tiers fuse them; a float32 dot product of n rounded products is still
  //    within n·2^-24 of exact relative to Σ|q·k|, so ε_s holds for it too,
  //    and likewise the bound on Σ p·v below.)
  //  * bf16 only: p_t is rounded to bf16, and values that close may round to
  //    neighbouring bf16 numbers: one step, ≤ 2^-7·p_t.
  //  * Σ p·v in float32 in two orders: 2·visible·2^-24 relative to Σ p·|v|.
  //  * bf16 only: the final rounding of two nearby floats may differ by one
  //    bf16 step of the result.
  // Together: |Δo_i| ≤ rel·Σ_t p_t·|v_ti| (+ one bf16 step of o_i for bf16),
  // rel = 2·ε_s + (10 + 4·visible)·2^-24 (+ 2^-7 for bf16).
  at::manual_seed(14);
  const int64_t heads = 16, kv_heads = 8, head_dim = 128, capacity = 1200;
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t batch : {1, 2, 5, 8}) {
        const std::string tier = isa_name(isa);
        CAPTURE(tier);
        const std::string dtype_name = c10::toString(dtype);
        CAPTURE(dtype_name);
        CAPTURE(batch);
        std::vector<TestCache> caches;
        std::vector<KvSequence> sequences;
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t visible = std::vector<int64_t>{1, 100, 1000, 17, 1200, 333, 64, 2}[b];
          caches.push_back(make_cache(kv_heads, capacity, head_dim, visible, dtype));
          sequences.push_back({caches[b].keys.data_ptr(), caches[b].values.data_ptr(), capacity, visible});
        }
        const at::Tensor q = activations({batch, heads, head_dim}, dtype, 1.5);
        at::Tensor out = at::empty({batch, heads * head_dim}, dtype);
        decode_attention(storage_of(dtype), q.data_ptr(), sequences.data(), batch, {heads, kv_heads, head_dim},
                         out.data_ptr(), isa);
        for (int64_t b = 0; b < batch; ++b) {
          CAPTURE(b);
          const Reference want = aten_attention(q[b], caches[b]);
          const double visible = double(caches[b].visible);
          double rel = 2 * want.score_error + (10 + 4 * visible) * std::ldexp(1.0, -24);
          if (dtype == at::kBFloat16) rel += std::ldexp(1.0, -7);
          at::Tensor bound = want.weighted_abs_v * rel;
          if (dtype == at::kBFloat16) bound += bf16_ulp(want.out.to(at::kFloat).abs() + bound);
          const at::Tensor got = out[b].view({heads, head_dim}).to(at::kFloat);
          const at::Tensor diff = (got - want.out.to(at::kFloat)).abs();
          CHECK(at::isfinite(got).all().item<bool>());
          CHECK((diff <= bound).all().item<bool>());
        }
      }
}

TEST_CASE("decode ops: decode_attention with other head groupings and head sizes") {
  at::manual_seed(15);
  struct Shape {
    int64_t heads, kv_heads, head_dim;
  };
  for (Isa isa : tiers_here())
    for (const Shape& shape : {Shape{4, 4, 64}, Shape{8, 1, 40}, Shape{6, 2, 128}, Shape{3, 3, 17}}) {
      const std::string tier = isa_name(isa);
      CAPTURE(tier);
      CAPTURE(shape.heads);
      CAPTURE(shape.head_dim);
      const int64_t capacity = 80, visible = 77;
      const TestCache cache = make_cache(shape.kv_heads, capacity, shape.head_dim, visible, at::kFloat);
      const KvSequence seq{cache.keys.data_ptr(), cache.values.data_ptr(), capacity, visible};
      const at::Tensor q = activations({1, shape.heads, shape.head_dim}, at::kFloat);
      at::Tensor out = at::empty({1, shape.heads * shape.head_dim});
      decode_attention(Storage::F32, q.data_ptr(), &seq, 1, {shape.heads, shape.kv_heads, shape.head_dim},
                       out.data_ptr(), isa);
      const Reference want = aten_attention(q[0], cache);
      const double rel = 2 * want.score_error + (10 + 4 * double(visible)) * std::ldexp(1.0, -24);
      CHECK(((out.view({shape.heads, shape.head_dim}) - want.out).abs() <= want.weighted_abs_v * rel)
                .all()
                .item<bool>());
    }
}

TEST_CASE("decode ops: decode_attention refuses inconsistent shapes and caches") {
  at::Tensor cache = at::zeros({2, 4, 8});
  at::Tensor q = at::zeros({1, 4, 8}), out = at::zeros({1, 32});
  const KvSequence good{cache.data_ptr(), cache.data_ptr(), 4, 4};
  const KvSequence too_long{cache.data_ptr(), cache.data_ptr(), 4, 5};
  const KvSequence empty{cache.data_ptr(), cache.data_ptr(), 4, 0};
  CHECK_NOTHROW(decode_attention(Storage::F32, q.data_ptr(), &good, 1, {4, 2, 8}, out.data_ptr()));
  CHECK_THROWS_AS(decode_attention(Storage::F32, q.data_ptr(), &too_long, 1, {4, 2, 8}, out.data_ptr()), qvl::Error);
  CHECK_THROWS_AS(decode_attention(Storage::F32, q.data_ptr(), &empty, 1, {4, 2, 8}, out.data_ptr()), qvl::Error);
  CHECK_THROWS_AS(decode_attention(Storage::F32, q.data_ptr(), &good, 1, {4, 3, 8}, out.data_ptr()), qvl::Error);
}

TEST_CASE("decode ops: causal_attention gives each query decode_attention's bits over its own prefix") {
  // A prefill's query i sees positions [0, past + i]: the same bits as a
  // decode step at that position (so prefilling at once or token by token
  // agree), and decode_attention itself is held to ATen above. The cache is
  // NaN past the last new token, and a query that saw a later position than
  // its own would differ from the one-query result.
  at::manual_seed(16);
  const int64_t heads = 16, kv_heads = 8, head_dim = 128, capacity = 300;
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t past : {0, 37})
        for (int64_t n : {1, 2, 7, 64}) {
          const std::string tier = isa_name(isa);
          CAPTURE(tier);
          const std::string dtype_name = c10::toString(dtype);
          CAPTURE(dtype_name);
          CAPTURE(past);
          CAPTURE(n);
          const TestCache cache = make_cache(kv_heads, capacity, head_dim, past + n, dtype);
          const at::Tensor q = activations({n, heads, head_dim}, dtype, 1.5);
          at::Tensor out = at::empty({n, heads * head_dim}, dtype);
          causal_attention(storage_of(dtype), q.data_ptr(), {cache.keys.data_ptr(), cache.values.data_ptr(), capacity, past + n},
                           n, {heads, kv_heads, head_dim}, out.data_ptr(), isa);
          bool all_equal = true;
          for (int64_t i = 0; i < n; ++i) {
            const KvSequence own{cache.keys.data_ptr(), cache.values.data_ptr(), capacity, past + i + 1};
            at::Tensor one = at::empty({1, heads * head_dim}, dtype);
            decode_attention(storage_of(dtype), q[i].data_ptr(), &own, 1, {heads, kv_heads, head_dim}, one.data_ptr(), isa);
            all_equal = all_equal && at::equal(out[i], one[0]);
          }
          CHECK(all_equal);
          CHECK(at::isfinite(out).all().item<bool>());
        }
}

TEST_CASE("decode ops: causal_attention refuses inconsistent shapes and caches") {
  at::Tensor cache = at::zeros({2, 4, 8});
  at::Tensor q = at::zeros({3, 4, 8}), out = at::zeros({3, 32});
  const KvSequence good{cache.data_ptr(), cache.data_ptr(), 4, 4};
  CHECK_NOTHROW(causal_attention(Storage::F32, q.data_ptr(), good, 3, {4, 2, 8}, out.data_ptr()));
  // Fewer visible positions than new queries, more than the capacity, no keys.
  CHECK_THROWS_AS(causal_attention(Storage::F32, q.data_ptr(), {cache.data_ptr(), cache.data_ptr(), 4, 2}, 3, {4, 2, 8},
                                   out.data_ptr()),
                  qvl::Error);
  CHECK_THROWS_AS(causal_attention(Storage::F32, q.data_ptr(), {cache.data_ptr(), cache.data_ptr(), 4, 5}, 3, {4, 2, 8},
                                   out.data_ptr()),
                  qvl::Error);
  CHECK_THROWS_AS(causal_attention(Storage::F32, q.data_ptr(), {nullptr, cache.data_ptr(), 4, 4}, 3, {4, 2, 8},
                                   out.data_ptr()),
                  qvl::Error);
  CHECK_THROWS_AS(causal_attention(Storage::F32, q.data_ptr(), good, 3, {4, 3, 8}, out.data_ptr()), qvl::Error);
}

TEST_CASE("decode ops: silu_mul rounds silu(gate) once, then the product") {
  // The kernel's contract is float32 math with one rounding of silu(g) to the
  // storage and one of the product: want = round(round(silu(g))·up), silu(g)
  // taken in float64 here. (ATen 1.13's bf16 silu_ also rounds e^-g and
  // 1 + e^-g to bf16, up to ~2 bf16 steps from silu(g); its float32 silu is the
  // single-rounding formula, so float32 is also checked against ATen.)
  // The kernel's e^x is a polynomial within a few float ulps (≤ 1.21 ulp on
  // every tier, measured over [-87, 88]); 1 + e^-g, one division and one
  // product follow: 16·2^-24 relative before the last rounding covers it. In
  // bf16 that moves round(silu(g)) by at most one step where silu(g) sits that
  // close to a rounding boundary, and the product's rounding by one step:
  // |Δ| ≤ step(silu(g))·|up| + step(result). Float32: |Δ| ≤ 2^-20·|silu(g)·up|.
  at::manual_seed(17);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t n : {int64_t(8 * 6144), int64_t(6144), int64_t(37)}) {
        const std::string tier = isa_name(isa);
        CAPTURE(tier);
        const std::string dtype_name = c10::toString(dtype);
        CAPTURE(dtype_name);
        CAPTURE(n);
        const at::Tensor gate = activations({n}, dtype, 3.0), up = activations({n}, dtype, 2.0);
        at::Tensor got = gate.clone();
        silu_mul(storage_of(dtype), got.data_ptr(), up.data_ptr(), n, isa);
        const at::Tensor silu = at::silu(gate.to(at::kDouble)).to(dtype);
        const at::Tensor want = (silu.to(at::kFloat) * up.to(at::kFloat)).to(dtype).to(at::kFloat);
        const at::Tensor bound =
            dtype == at::kFloat
                ? (silu.to(at::kDouble) * up.to(at::kDouble)).abs().to(at::kFloat) * std::ldexp(1.0, -20) + 1e-30
                : bf16_ulp(silu.to(at::kFloat)) * up.to(at::kFloat).abs() + bf16_ulp(want) + 1e-30;
        const at::Tensor diff = (got.to(at::kFloat) - want).abs();
        CAPTURE((diff / bound).max().item<double>());
        CHECK((diff <= bound).all().item<bool>());
        if (dtype == at::kFloat) {
          at::Tensor aten = gate.clone();
          at::silu_(aten).mul_(up);
          CHECK(((got - aten).abs() <= aten.abs() * std::ldexp(1.0, -20) + 1e-30).all().item<bool>());
        }
      }
}
