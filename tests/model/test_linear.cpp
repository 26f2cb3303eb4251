// tensor::linear on bf16 weights: the GEMV (vectors in groups of kMaxBatch
// above it) up to kBf16GemvMaxRows rows, a matmul beyond. Every row count on either side
// of both limits gives the float32 product of the same bf16 values, within
// the bf16 output's rounding; the tier suites run this on each CPU tier.
#include "qvl/tensor/linear.h"

#include "qvl/kernels/gemv.h"
#include "torch_test_support.h"

TEST_CASE("linear bf16: every row count, through the GEMV's groups or the matmul, is the float32 product") {
  at::manual_seed(7);
  const int64_t in = 96, out = 40, limit = qvl::tensor::kBf16GemvMaxRows;
  CHECK(limit >= qvl::kernels::kMaxBatch);
  const at::Tensor w = at::randn({out, in}).to(at::kBFloat16);
  const at::Tensor bias = at::randn({out}).to(at::kBFloat16);
  for (int64_t rows : {int64_t(1), int64_t(7), qvl::kernels::kMaxBatch, qvl::kernels::kMaxBatch + 1, limit - 1, limit,
                       limit + 1, 2 * limit + 3}) {
    CAPTURE(rows);
    const at::Tensor x = at::randn({rows, in}).to(at::kBFloat16);
    const at::Tensor got = qvl::tensor::linear(x, w, bias);
    REQUIRE((got.sizes() == at::IntArrayRef({rows, out})));
    CHECK((got.scalar_type() == at::kBFloat16));
    const at::Tensor want = at::linear(x.to(at::kFloat), w.to(at::kFloat), bias.to(at::kFloat));
    // One bf16 rounding of each output (2^-9 relative) plus float32 sums in
    // another order: within 2^-8 of each row's largest value.
    const at::Tensor error = (got.to(at::kFloat) - want).abs().amax(1) / want.abs().amax(1);
    CHECK(error.max().item<double>() <= 1.0 / 256);
  }
}
