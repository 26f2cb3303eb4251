// The avx512 tier's float32 attention: attention_detail.h's algorithm on
// 16-lane registers with FMA (tiles of 32 queries, 8 keys or 8 dims at a
// time: 16 accumulators). Runs f32 storage, and bf16 on CPUs without
// AVX512-BF16 (keys and values widened once per block of queries). Built
// with AVX-512 F+BW+VL+DQ and entered only when that tier is active.
#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/attention_avx512_ops.h"

namespace qvl::kernels::attention_detail {

void attend_avx512(const Job& job) {
  job.storage == Storage::F32 ? attend_f32<Avx512Ops, float>(job) : attend_f32<Avx512Ops, uint16_t>(job);
}

}  // namespace qvl::kernels::attention_detail
