// Dispatch and checks of the attention kernel, and its portable version (the
// generic and neon tiers): attention_detail.h's algorithm on 4-float vectors
// of the compiler's vector extension (the baseline ISA's registers).
#include "qvl/kernels/attention.h"

#include <fmt/core.h>

#include <cstring>

#include "qvl/error.h"
#include "qvl/kernels/attention_detail.h"

namespace qvl::kernels {

namespace attention_detail {
namespace {

// Four floats as a GCC/Clang vector: SSE2 on x86-64, NEON on aarch64, with
// the compiler's own lowering elsewhere. (Arrays of floats with lane loops
// stayed scalar, ~1.4 GFLOP/s; this runs ~5-10× that.)
struct PortableOps {
  static constexpr int kWidth = 4, kQueryVectors = 2, kKeyTile = 4, kDimTile = 4;
  static constexpr int64_t kKeyBlock = 64;
  typedef float Vec __attribute__((vector_size(16)));
  static Vec zero() { return set1(0.0f); }
  static Vec set1(float a) { return Vec{a, a, a, a}; }
  static Vec load(const float* p) {
    Vec r;
    std::memcpy(&r, p, sizeof r);
    return r;
  }
  static void store(float* p, Vec a) { std::memcpy(p, &a, sizeof a); }
  static Vec add(Vec a, Vec b) { return a + b; }
  static Vec sub(Vec a, Vec b) { return a - b; }
  static Vec mul(Vec a, Vec b) { return a * b; }
  // a·b + c, as a multiply and an add: the baseline ISAs have no FMA.
  static Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
  static Vec max(Vec a, Vec b) {
    Vec r;
    for (int i = 0; i < kWidth; ++i) r[i] = simd_portable::max_of(a[i], b[i]);
    return r;
  }
  static Vec exp(Vec a) {
    Vec r;
    for (int i = 0; i < kWidth; ++i) r[i] = simd_portable::exp_poly(a[i]);
    return r;
  }
};

}  // namespace

void attend_portable(Storage s, const Job& job) {
  s == Storage::F32 ? attend_f32<PortableOps, float>(job) : attend_f32<PortableOps, uint16_t>(job);
}

Job make_job(Storage s, const AttentionTensors& t, const AttentionBlock& b, float scale) {
  const size_t element = s == Storage::F32 ? sizeof(float) : sizeof(uint16_t);
  const int64_t head_first = (b.head * t.tokens + b.start) * t.head_dim;
  const auto at = [&](const void* p, int64_t index) { return static_cast<const char*>(p) + size_t(index) * element; };
  return Job{at(t.q, head_first),
             at(t.k, head_first),
             at(t.v, head_first),
             static_cast<char*>(t.out) + size_t((b.start * t.heads + b.head) * t.head_dim) * element,
             t.heads * t.head_dim,
             t.head_dim,
             b.length,
             b.query_begin,
             b.queries,
             scale};
}

}  // namespace attention_detail

void attend_block(Storage s, const AttentionTensors& t, const AttentionBlock& b, float scale, Isa isa) {
  require_isa(isa, "attend_block");
  if (t.heads <= 0 || t.head_dim <= 0 || t.tokens < 0 || b.head < 0 || b.head >= t.heads || b.start < 0 ||
      b.length < 0 || b.start + b.length > t.tokens || b.query_begin < 0 || b.queries < 0 ||
      b.query_begin + b.queries > b.length)
    throw Error(fmt::format("attend_block: queries {}+{} of tokens {}+{} in head {} lie outside {} tokens × {} heads",
                            b.query_begin, b.queries, b.start, b.length, b.head, t.tokens, t.heads));
  if (b.queries == 0) return;
  const attention_detail::Job job = attention_detail::make_job(s, t, b, scale);
#if QVL_X86
  if (isa == Isa::Avx512) {
    if (s == Storage::BF16 && cpu_features().avx512_bf16 && t.head_dim % 2 == 0)
      return attention_detail::attend_avx512_bf16(s, job);
    return attention_detail::attend_avx512(s, job);
  }
  if (isa == Isa::Avx2) return attention_detail::attend_avx2(s, job);
#endif
  attention_detail::attend_portable(s, job);
}

}  // namespace qvl::kernels
