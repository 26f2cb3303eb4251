#include "qvl/tensor/aten_sum_order.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "qvl/kernels/decode_ops.h"

namespace qvl::tensor {

int aten_sum_lanes() {
  static const int lanes = [] {
    using kernels::Storage;
    // Values of mixed magnitudes, summed by ATen and by each candidate order;
    // a probe on which the candidates agree says nothing, so try another.
    std::vector<float> values(96);
    uint32_t state = 12345;
    for (int attempt = 0; attempt < 64; ++attempt) {
      for (float& v : values) {
        state = state * 1664525u + 1013904223u;
        v = std::ldexp(float(state >> 8) / float(1 << 24), int(state % 24) - 12);
      }
      const at::Tensor t = at::from_blob(values.data(), {1, int64_t(values.size())}, at::kFloat);
      const float aten = t.square().sum(-1).item<float>();
      const int64_t n = int64_t(values.size());
      const float by8 = kernels::sum_of_squares_in_order(Storage::F32, values.data(), n, 8);
      const float by16 = kernels::sum_of_squares_in_order(Storage::F32, values.data(), n, 16);
      if (by8 == by16) continue;
      return aten == by8 ? 8 : 16;
    }
    return 16;
  }();
  return lanes;
}

}  // namespace qvl::tensor
