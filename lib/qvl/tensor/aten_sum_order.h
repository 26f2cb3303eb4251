// The vector width ATen's CPU float sum accumulates in, which the decode
// kernels' norms need to reproduce its bits (kernels/decode_ops.h, sum_lanes).
#pragma once

namespace qvl::tensor {

// 16 when ATen runs its AVX-512 kernels, 8 for AVX2 and its default ones:
// found once by asking ATen to sum probe values and comparing with each order.
int aten_sum_lanes();

}  // namespace qvl::tensor
