// Dispatch and checks of the attention kernel, and its portable version (the
// generic and neon tiers): attention_detail.h's algorithm on 4-float vectors
// of the compiler's vector extension (the baseline ISA's registers).
#include "qvl/kernels/attention.h"

#include <fmt/core.h>

#include <cstring>
#include <vector>

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
  static void score_int8(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
    score_int8_portable(op, first, keys, kWidth * kQueryVectors, s);
  }
  static constexpr QuantizeRows quantize = quantize_rows_portable;
};

// The int8 operands' storage, per thread, reused from job to job.
struct Int8Rows {
  std::vector<int8_t> values;
  std::vector<float> scales;
  std::vector<int32_t> sums;
  int64_t padded_dim = 0;
  void quantize(QuantizeRows quantize, Storage s, const void* x, int64_t rows, int64_t head_dim) {
    padded_dim = (head_dim + 3) / 4 * 4;
    values.resize(size_t(rows * padded_dim));
    scales.resize(size_t(rows));
    sums.resize(size_t(rows));
    quantize(s, x, rows, head_dim, padded_dim, values.data(), scales.data(), sums.data());
  }
  Int8RowsView view() const { return {values.data(), scales.data(), sums.data(), padded_dim}; }
};
struct Int8Scratch {
  Int8Rows keys, queries;
  std::vector<int8_t> tile_values;
  std::vector<float> tile_scales;
};

// attention_detail.h's quantization, written so the compiler vectorizes the
// rounding for the baseline ISA (adding 1.5 · 2^23 leaves no fraction bits:
// round-half-even for |v| < 2^22, as int8_gemm.cpp rounds).
template <class T>
void quantize_rows(const T* x, int64_t rows, int64_t head_dim, int64_t padded_dim, int8_t* values, float* scales,
                   int32_t* sums) {
  constexpr float kShifter = 12582912.0f;  // 1.5 · 2^23
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * head_dim;
    int8_t* out = values + r * padded_dim;
    std::fill(out, out + padded_dim, int8_t(0));
    float max_abs = 0.0f;
    for (int64_t d = 0; d < head_dim; ++d)
      max_abs = simd_portable::max_of(std::fabs(simd_portable::load(row, d)), max_abs);  // a NaN is skipped
    scales[r] = max_abs / 127.0f;
    int32_t sum = 0;
    if (max_abs != 0.0f) {
      const float inverse = 127.0f / max_abs;
      for (int64_t d = 0; d < head_dim; ++d) {
        const float level = (simd_portable::load(row, d) * inverse + kShifter) - kShifter;
        // max_of/min_of, not std::clamp: a NaN becomes -127 (as maxps
        // makes it in the vector tiers), not an undefined conversion.
        out[d] = int8_t(simd_portable::min_of(simd_portable::max_of(level, -127.0f), 127.0f));
        sum += out[d];
      }
    }
    sums[r] = sum;
  }
}

}  // namespace

void quantize_rows_portable(Storage s, const void* x, int64_t rows, int64_t head_dim, int64_t padded_dim,
                            int8_t* values, float* scales, int32_t* sums) {
  if (s == Storage::F32)
    quantize_rows(static_cast<const float*>(x), rows, head_dim, padded_dim, values, scales, sums);
  else
    quantize_rows(static_cast<const uint16_t*>(x), rows, head_dim, padded_dim, values, scales, sums);
}

Int8Operands prepare_int8_scores(const Job& job, int tile, QuantizeRows quantize) {
  thread_local Int8Scratch b;
  const size_t element = job.storage == Storage::F32 ? sizeof(float) : sizeof(uint16_t);
  const void* first_query = static_cast<const char*>(job.q) + size_t(job.query_begin * job.head_dim) * element;
  b.keys.quantize(quantize, job.storage, job.k, job.length, job.head_dim);
  b.queries.quantize(quantize, job.storage, first_query, job.queries, job.head_dim);
  b.tile_values.resize(size_t(b.keys.padded_dim * tile));
  b.tile_scales.resize(size_t(tile));
  return {b.keys.view(), b.queries.view(), {b.tile_values.data(), b.tile_scales.data()}};
}

void pack_query_tile_int8(const Int8Operands& op, int64_t first, int64_t count, int tile) {
  const int64_t padded_dim = op.queries.padded_dim;
  std::memset(op.tile.values, 0, size_t(padded_dim * tile));
  std::fill(op.tile.scales, op.tile.scales + tile, 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    const int8_t* row = op.queries.values + (first + i) * padded_dim;
    for (int64_t step = 0; step < padded_dim / 4; ++step)
      std::memcpy(op.tile.values + (step * tile + i) * 4, row + 4 * step, 4);
    op.tile.scales[i] = op.queries.scales[first + i];
  }
}

// The baseline ISAs have no byte or 32-bit integer multiply-add worth the
// name (SSE2: no pmulld), so for the portable tier's own tile the values are
// multiplied as floats, by the float scores' kernel (Tile::score_keys): every
// product (|q·k| <= 127²) and every partial sum over up to kExactFloatDims
// dims is an integer below 2^24, so each float operation is exact and the
// sum is the integer dot product. (An integer loop ran 3x slower than the
// float scores.) Other tiles, and longer rows, take that integer loop.
constexpr int64_t kExactFloatDims = 1024;

void score_int8_portable(const Int8Operands& op, int64_t first, int64_t keys, int tile, float* s) {
  const int64_t padded_dim = op.keys.padded_dim;
  using TileOps = Tile<PortableOps>;
  if (tile == TileOps::Q && padded_dim <= kExactFloatDims) {
    thread_local std::vector<float> queries, key_rows;
    queries.resize(size_t(padded_dim * tile));  // queries[d][lane]
    for (int64_t d = 0; d < padded_dim; ++d)
      for (int lane = 0; lane < tile; ++lane)
        queries[size_t(d * tile + lane)] = float(op.tile.values[((d / 4) * tile + lane) * 4 + d % 4]);
    key_rows.resize(size_t(keys * padded_dim));
    const int8_t* k = op.keys.values + first * padded_dim;
    for (int64_t i = 0; i < keys * padded_dim; ++i) key_rows[size_t(i)] = float(k[i]);
    int64_t j = 0;
    for (; j + PortableOps::kKeyTile <= keys; j += PortableOps::kKeyTile)
      TileOps::score_keys<PortableOps::kKeyTile>(key_rows.data() + j * padded_dim, padded_dim, queries.data(),
                                                 s + j * tile);
    for (; j < keys; ++j) TileOps::score_keys<1>(key_rows.data() + j * padded_dim, padded_dim, queries.data(), s + j * tile);
    for (j = 0; j < keys; ++j) {
      const float key_scale = op.keys.scales[first + j];
      for (int lane = 0; lane < tile; ++lane) s[j * tile + lane] *= op.tile.scales[lane] * key_scale;
    }
    return;
  }
  for (int64_t j = 0; j < keys; ++j) {
    const int8_t* k = op.keys.values + (first + j) * padded_dim;
    const float key_scale = op.keys.scales[first + j];
    for (int lane = 0; lane < tile; ++lane) {
      int32_t dot = 0;
      for (int64_t d = 0; d < padded_dim; ++d)
        dot += int32_t(op.tile.values[((d / 4) * tile + lane) * 4 + d % 4]) * k[d];
      s[j * tile + lane] = float(dot) * (op.tile.scales[lane] * key_scale);
    }
  }
}

void attend_portable(const Job& job) {
  job.storage == Storage::F32 ? attend_f32<PortableOps, float>(job) : attend_f32<PortableOps, uint16_t>(job);
}

#if defined(__aarch64__)
namespace {
struct NeonDotprodOps : PortableOps {
  static void score_int8(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
    score_int8_neon_dotprod(op, first, keys, s);
  }
};
static_assert(NeonDotprodOps::kWidth * NeonDotprodOps::kQueryVectors == 8, "score_int8_neon_dotprod's tile");
}  // namespace

void attend_neon_dotprod(const Job& job) {
  job.storage == Storage::F32 ? attend_f32<NeonDotprodOps, float>(job) : attend_f32<NeonDotprodOps, uint16_t>(job);
}
#endif

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
             scale,
             s,
             t.scores == AttentionScores::Int8};
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
    if (job.int8_scores && !cpu_features().avx512_vnni) return attention_detail::attend_avx2(job);
    // (The bf16 kernel pairs dims only for float scores.)
    if (s == Storage::BF16 && cpu_features().avx512_bf16 && (job.int8_scores || t.head_dim % 2 == 0))
      return attention_detail::attend_avx512_bf16(job);
    return attention_detail::attend_avx512(job);
  }
  if (isa == Isa::Avx2Vnni && job.int8_scores) return attention_detail::attend_avx2_vnni(job);
  if (runs_avx2_code(isa)) return attention_detail::attend_avx2(job);
#elif defined(__aarch64__)
  if (isa == Isa::Neon && job.int8_scores && cpu_features().neon_dotprod)
    return attention_detail::attend_neon_dotprod(job);
#endif
  attention_detail::attend_portable(job);
}

}  // namespace qvl::kernels
