// The bf16 GEMM ceiling of this machine as qvl reaches it: prefill's and the
// vision encoder's projections go through tensor::linear_into, so that is what
// is timed (oneDNN via ATen on the avx512 tier, widened float32 on OpenBLAS
// elsewhere: see linear.h). The torch-free probes are in kernels/machine_probe.h.
#pragma once
#include <cstdint>

#include "qvl/kernels/machine_probe.h"

namespace qvl::tensor {

// x [m, k] · W [n, k]ᵀ in bf16 (random values), called until min_seconds have
// passed (at least 3 timed calls after one warm-up); the best call counts.
// Default: 512 prompt tokens against a 2B MLP projection (2048 -> 6144).
// Throws qvl::Error on sizes that are not positive.
kernels::ThroughputProbe measure_bf16_gemm(int64_t m = 512, int64_t k = 2048, int64_t n = 6144,
                                           double min_seconds = 0.6);

}  // namespace qvl::tensor
