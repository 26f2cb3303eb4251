// The vision kernels (kernels/vision_ops.h) against ATen's own ops, on every
// tier this CPU runs (kernels/cpu.h), in float32 and bfloat16, with row
// lengths that leave partial vectors. The bf16 results are compared with ATen
// run in float32 on the same bf16 values: the kernels promise float32
// arithmetic with one rounding at the end (ATen 1.13's own bf16 LayerNorm
// rounds in between and lands further from the float32 result). That the avx2
// and avx512 tiers agree bit for bit is checked without torch, in the unit
// suite (tests/unit/test_kernels_tiers.cpp).
#include <ATen/ATen.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/cpu.h"
#include "qvl/kernels/vision_ops.h"

namespace {

using qvl::kernels::Isa;
using qvl::kernels::Storage;

constexpr Isa kAllTiers[] = {Isa::Generic, Isa::Neon, Isa::Avx2, Isa::Avx512};

std::vector<Isa> tiers_here() {
  std::vector<Isa> tiers;
  for (Isa isa : kAllTiers)
    if (qvl::kernels::isa_supported(isa)) tiers.push_back(isa);
  return tiers;
}

Storage storage_of(at::ScalarType t) { return t == at::kFloat ? Storage::F32 : Storage::BF16; }

// Largest difference relative to the largest reference value.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE((got.sizes() == want.sizes()));
  return ((got.to(at::kFloat) - want.to(at::kFloat)).abs().max() / want.to(at::kFloat).abs().max()).item<double>();
}

// float32 results differ from ATen by float rounding only (on every tier: the
// exponential is within 1.21 float ulps, the row sums run in 16 float lanes);
// bf16 results may land one bf16 step (2^-8 relative) apart when the float
// values straddle a rounding boundary.
double tolerance(at::ScalarType t) { return t == at::kFloat ? 2e-6 : 4e-3; }

std::vector<float> floats(const at::Tensor& t) {
  at::Tensor f = t.to(at::kFloat).contiguous();
  return std::vector<float>(f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
}

const at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16};

}  // namespace

TEST_CASE("vision kernels: layer norm, with and without the residual add, matches ATen") {
  at::manual_seed(1);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t cols : {1024, 37, 8}) {
        CAPTURE(std::string(qvl::kernels::isa_name(isa)));
        CAPTURE(c10::toString(dtype));
        CAPTURE(cols);
        const int64_t rows = 45;
        at::Tensor x = (at::randn({rows, cols}) * 3 + 0.5).to(dtype);
        at::Tensor add = at::randn({rows, cols}).to(dtype);
        at::Tensor gamma = at::randn({cols}), beta = at::randn({cols});
        const auto g = floats(gamma), b = floats(beta);

        at::Tensor plain = x.clone(), y = at::empty_like(x);
        qvl::kernels::add_layer_norm(storage_of(dtype), plain.data_ptr(), nullptr, y.data_ptr(), g.data(), b.data(),
                                     rows, cols, 1e-6f, isa);
        CHECK(at::equal(plain, x));  // no add: x is left alone
        at::Tensor want = at::layer_norm(x.to(at::kFloat), {cols}, gamma, beta, 1e-6);
        CHECK(relative_error(y, want) <= tolerance(dtype));

        at::Tensor summed = x.clone();
        qvl::kernels::add_layer_norm(storage_of(dtype), summed.data_ptr(), add.data_ptr(), y.data_ptr(), g.data(),
                                     b.data(), rows, cols, 1e-6f, isa);
        CHECK(at::equal(summed, x + add));  // the residual is rounded exactly as ATen's add rounds it
        CHECK(relative_error(y, at::layer_norm((x + add).to(at::kFloat), {cols}, gamma, beta, 1e-6)) <=
              tolerance(dtype));
      }
}

TEST_CASE("vision kernels: tanh-GELU matches ATen's gelu(approximate='tanh')") {
  at::manual_seed(2);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes) {
      CAPTURE(std::string(qvl::kernels::isa_name(isa)));
      CAPTURE(c10::toString(dtype));
      // Wide range, including values where tanh saturates and exp overflows.
      at::Tensor x = at::cat({at::randn({4099}) * 4, at::tensor({-100.0f, -12.0f, 0.0f, 12.0f, 100.0f})}).to(dtype);
      at::Tensor got = x.clone();
      qvl::kernels::gelu_tanh(storage_of(dtype), got.data_ptr(), got.numel(), isa);
      at::Tensor want = at::gelu(x.to(at::kFloat), "tanh");
      // Elementwise: each value close to its own reference, small ones included.
      const double tol = tolerance(dtype);
      CHECK(((got.to(at::kFloat) - want).abs() <= want.abs() * tol + 1e-6).all().item<bool>());
      CHECK(got.isfinite().all().item<bool>());
    }
}

TEST_CASE("vision kernels: scaled softmax matches ATen") {
  at::manual_seed(3);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t cols : {1200, 19, 1}) {
        CAPTURE(std::string(qvl::kernels::isa_name(isa)));
        CAPTURE(c10::toString(dtype));
        CAPTURE(cols);
        const float scale = 0.125f;
        at::Tensor x = (at::randn({33, cols}) * 30).to(dtype);
        at::Tensor got = x.clone();
        qvl::kernels::softmax_rows(storage_of(dtype), got.data_ptr(), 33, cols, scale, isa);
        at::Tensor want = at::softmax(x.to(at::kFloat) * scale, -1);
        CHECK(((got.to(at::kFloat) - want).abs() <= want * tolerance(dtype) + 1e-7).all().item<bool>());
        CHECK((got.to(at::kFloat).sum(-1) - 1).abs().max().item<float>() <= (dtype == at::kFloat ? 1e-5 : 2e-2));
      }
}

TEST_CASE("vision kernels: qkv split with the 2-D rotary matches the reference formula") {
  at::manual_seed(4);
  for (Isa isa : tiers_here())
    for (at::ScalarType dtype : kDtypes)
      for (int64_t head_dim : {64, 16, 6}) {
        CAPTURE(std::string(qvl::kernels::isa_name(isa)));
        CAPTURE(c10::toString(dtype));
        CAPTURE(head_dim);
        const int64_t tokens = 21, heads = 3, half = head_dim / 2;
        at::Tensor qkv = at::randn({tokens, 3 * heads * head_dim}).to(dtype);
        at::Tensor angles = at::rand({tokens, half}) * 20;
        at::Tensor cos = at::cat({angles, angles}, 1).cos(), sin = at::cat({angles, angles}, 1).sin();
        at::Tensor q = at::empty({heads, tokens, head_dim}, qkv.options());
        at::Tensor k = at::empty_like(q), v = at::empty_like(q);
        qvl::kernels::split_qkv_rotary(storage_of(dtype), qkv.data_ptr(), cos.data_ptr<float>(),
                                       sin.data_ptr<float>(), tokens, heads, head_dim, q.data_ptr(), k.data_ptr(),
                                       v.data_ptr(), isa);
        // x·cos + rotate_half(x)·sin in float32, per head; then [heads, tokens, head_dim].
        at::Tensor parts = qkv.view({tokens, 3, heads, head_dim});
        auto rotate = [&](at::Tensor x) {
          at::Tensor x32 = x.to(at::kFloat);
          at::Tensor swapped = at::cat({-x32.narrow(-1, half, half), x32.narrow(-1, 0, half)}, -1);
          return (x32 * cos.unsqueeze(1) + swapped * sin.unsqueeze(1)).to(dtype).transpose(0, 1);
        };
        CHECK(relative_error(q, rotate(parts.select(1, 0))) <= tolerance(dtype));
        CHECK(relative_error(k, rotate(parts.select(1, 1))) <= tolerance(dtype));
        CHECK(at::equal(v, parts.select(1, 2).transpose(0, 1)));
      }
}

TEST_CASE("vision kernels: the position embedding blend equals ATen's index_select, multiply and adds") {
  at::manual_seed(5);
  for (at::ScalarType dtype : kDtypes)
    for (int64_t cols : {1024, 37}) {
      CAPTURE(c10::toString(dtype));
      CAPTURE(cols);
      const int64_t rows = 29, table_rows = 50;
      at::Tensor table = at::randn({table_rows, cols}).to(dtype);
      at::Tensor corners = at::randint(0, table_rows, {4, rows}, at::kLong);
      at::Tensor weights = at::rand({4, rows});
      at::Tensor x = at::randn({rows, cols}).to(dtype);
      // The formula the reference (and qvl before the fused kernel) evaluates.
      at::Tensor blended = table.index_select(0, corners.reshape({-1})).view({4, rows, cols}).to(at::kFloat) *
                           weights.unsqueeze(-1);
      at::Tensor want = (x.to(at::kFloat) + (blended[0] + blended[1] + blended[2] + blended[3])).to(dtype);
      qvl::kernels::add_position_embedding(storage_of(dtype), x.data_ptr(), table.data_ptr(), table_rows,
                                           corners.data_ptr<int64_t>(), weights.data_ptr<float>(), rows, cols);
      CHECK(at::equal(x, want));
      corners[2][7] = table_rows;
      CHECK_THROWS_AS(qvl::kernels::add_position_embedding(storage_of(dtype), x.data_ptr(), table.data_ptr(),
                                                           table_rows, corners.data_ptr<int64_t>(),
                                                           weights.data_ptr<float>(), rows, cols),
                      qvl::Error);
    }
}
