// The neon tier's int8 kernels on aarch64 CPUs with the dot-product
// extension (FEAT_DotProd, ARMv8.2+: Neoverse N1 and later — Graviton 2/3/4,
// Ampere Altra — Cortex-A76 and later, Apple M1 and later). Built with
// -march=armv8.2-a+dotprod (lib/CMakeLists.txt) and entered only when the
// neon tier is active on such a CPU (kernels/cpu.h: cpu_features().neon_dotprod).
//
// sdot multiplies signed bytes by signed bytes, 4 per 32-bit lane, and adds
// them to the lane.
//
// The int8 GEMM (int8_gemm_detail.h): the panel holds the signed q (int8_gemm_detail.h's layout
// with no +128, so x_bias is unused) and a 128-bit register of it is 4
// columns × 4 k. The lane-indexed form takes the 4 bytes of X from one lane
// of a register, so one 16-byte load of a row's X serves 4 steps.
//
// A tile is 4 rows × 16 columns: 16 accumulators, 4 weight registers and 4
// registers of X (24 of the 32). The float epilogue is the x86 kernels'
// (total = dot · (w_scale · x_scale) + total, fused; for int4 weights then
// + min · (x_scale · Σ xq), fused), in a small array touched once per group.
// Int4 levels are unpacked a panel at a time into a buffer (pack_panel_portable).
//
// The int8 attention scores (attention_detail.h, score_int8_*) on the
// portable kernel's tile of 8 queries: per step of 4 dims the tile is two
// registers (4 queries × 4 bytes each), each key's 4 bytes are broadcast,
// and the products are signed × signed, so no correction; the scales are
// applied as the portable scorer applies them (the same floats).
#include <arm_neon.h>

#include <cstring>

#include "qvl/kernels/attention_detail.h"
#include "qvl/kernels/gemv.h"
#include "qvl/kernels/int8_gemm_detail.h"

namespace qvl::kernels::detail {
namespace {

constexpr int kTileRows = 4;
constexpr int kTileRegisters = 4;  // 4 columns each
constexpr int64_t kTileColumns = 4 * kTileRegisters;
static_assert(kPanelColumns % kTileColumns == 0, "a panel is a whole number of tiles");

// Step `Lane` of 4 (4 k each) from `p`, its X in lane `Lane` of each row's xs.
template <int Lane, int R>
inline void step(int32x4_t (&dot)[R][kTileRegisters], const int8_t* p, const int8x16_t (&xs)[R]) {
  int8x16_t weights[kTileRegisters];
  for (int z = 0; z < kTileRegisters; ++z) weights[z] = vld1q_s8(p + Lane * kPanelBytesPer4 + 16 * z);
  for (int r = 0; r < R; ++r)
    for (int z = 0; z < kTileRegisters; ++z) dot[r][z] = vdotq_laneq_s32(dot[r][z], weights[z], xs[r], Lane);
}

// Rows [m0, m0 + R) × the tile of columns [c0, c0 + 16) of the panel (n0 the
// panel's first column; `columns` of the tile are real). kOffsets: an int4
// job (int8_gemm_detail.h), whose mins follow the scales.
template <int R, class Out, bool kOffsets>
void tile(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t m0, int64_t n0, int64_t c0,
          int64_t columns) {
  constexpr int Z = kTileRegisters;
  const Int8Matrix& w = *job.w;
  const int64_t groups = w.groups(), steps_per_group = w.group_size / 4;  // a multiple of 16
  const int8_t* x[R];
  for (int r = 0; r < R; ++r) x[r] = job.x_q + (m0 + r) * w.padded_cols;
  alignas(16) float total[R][4 * Z] = {};

  for (int64_t g = 0; g < groups; ++g) {
    int32x4_t dot[R][Z];
    for (int r = 0; r < R; ++r)
      for (int z = 0; z < Z; ++z) dot[r][z] = vdupq_n_s32(0);
    const int8_t* p = reinterpret_cast<const int8_t*>(panel) + g * steps_per_group * kPanelBytesPer4 + 4 * c0;
    const int64_t k0 = g * w.group_size;
    for (int64_t s = 0; s < steps_per_group; s += 4) {
      int8x16_t xs[R];
      for (int r = 0; r < R; ++r) xs[r] = vld1q_s8(x[r] + k0 + 4 * s);
      step<0>(dot, p + s * kPanelBytesPer4, xs);
      step<1>(dot, p + s * kPanelBytesPer4, xs);
      step<2>(dot, p + s * kPanelBytesPer4, xs);
      step<3>(dot, p + s * kPanelBytesPer4, xs);
    }
    float32x4_t ws[Z];
    for (int z = 0; z < Z; ++z) ws[z] = vld1q_f32(scales + g * kPanelColumns + c0 + 4 * z);
    for (int r = 0; r < R; ++r) {
      const float x_scale_value = job.x_scales[(m0 + r) * groups + g];
      const float32x4_t x_scale = vdupq_n_f32(x_scale_value);
      for (int z = 0; z < Z; ++z) {
        float32x4_t sum = vfmaq_f32(vld1q_f32(&total[r][4 * z]), vcvtq_f32_s32(dot[r][z]), vmulq_f32(ws[z], x_scale));
        if constexpr (kOffsets) {
          const float32x4_t offset = vdupq_n_f32(x_scale_value * float(job.x_bias[(m0 + r) * groups + g] / 128));
          sum = vfmaq_f32(sum, vld1q_f32(scales + (groups + g) * kPanelColumns + c0 + 4 * z), offset);
        }
        vst1q_f32(&total[r][4 * z], sum);
      }
    }
  }
  const int64_t real = columns < kTileColumns ? columns : kTileColumns;
  Out* y = static_cast<Out*>(job.y);
  for (int r = 0; r < R; ++r) {
    Out* row = y + (m0 + r) * job.y_stride + n0 + c0;
    for (int64_t j = 0; j < real; ++j) {
      const float value = job.bias ? total[r][j] + job.bias[n0 + c0 + j] : total[r][j];
      if constexpr (sizeof(Out) == sizeof(float))
        row[j] = value;
      else
        row[j] = float_to_bf16(value);
    }
  }
}

template <class Out, bool kOffsets>
void panel_rows(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0, int64_t columns) {
  for (int64_t c0 = 0; c0 < columns; c0 += kTileColumns) {
    const int64_t tile_columns = columns - c0;
    int64_t m = 0;
    for (; m + kTileRows <= job.rows; m += kTileRows) tile<kTileRows, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns);
    switch (job.rows - m) {
      case 3: tile<3, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
      case 2: tile<2, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
      case 1: tile<1, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
      default: break;
    }
  }
}
static_assert(kTileRows == 4, "one tail case per row count below kTileRows");

template <bool kOffsets>
void panel_rows_to(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0, int64_t columns) {
  if (job.y_storage == Storage::F32)
    panel_rows<float, kOffsets>(job, panel, scales, n0, columns);
  else
    panel_rows<uint16_t, kOffsets>(job, panel, scales, n0, columns);
}

constexpr int kScoreTile = 8, kKeyTile = 4;  // the portable kernel's tile (attention.cpp)

// s[j][lane] for the J keys from `first`.
template <int J>
void score_keys(const attention_detail::Int8Operands& op, int64_t first, float* s) {
  const int64_t padded_dim = op.keys.padded_dim;
  const int8_t* k = op.keys.values + first * padded_dim;
  int32x4_t acc[J][2];
  for (int j = 0; j < J; ++j) acc[j][0] = acc[j][1] = vdupq_n_s32(0);
  for (int64_t step = 0; step < padded_dim / 4; ++step) {
    const int8x16_t query[2] = {vld1q_s8(op.tile.values + step * kScoreTile * 4),
                                vld1q_s8(op.tile.values + step * kScoreTile * 4 + 16)};
    for (int j = 0; j < J; ++j) {
      int32_t four;
      std::memcpy(&four, k + j * padded_dim + 4 * step, 4);
      const int8x16_t key = vreinterpretq_s8_s32(vdupq_n_s32(four));
      for (int u = 0; u < 2; ++u) acc[j][u] = vdotq_s32(acc[j][u], query[u], key);
    }
  }
  for (int u = 0; u < 2; ++u) {
    const float32x4_t query_scales = vld1q_f32(op.tile.scales + 4 * u);
    for (int j = 0; j < J; ++j) {
      const float32x4_t scales = vmulq_f32(query_scales, vdupq_n_f32(op.keys.scales[first + j]));
      vst1q_f32(s + j * kScoreTile + 4 * u, vmulq_f32(vcvtq_f32_s32(acc[j][u]), scales));
    }
  }
}

}  // namespace

void int8_gemm_panels_neon_dotprod(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  const Int8Matrix& w = *job.w;
  const auto [panel, scales] = int8_gemm_panel_scratch(w);
  for (int64_t p = first_panel; p < end_panel; ++p) {
    const int64_t n0 = p * kPanelColumns, columns = panel_columns(w, p);
    if (columns <= 0) return;
    pack_panel_portable(job, n0, columns, 0, panel);
    pack_panel_scales(job, n0, columns, scales);
    if (job.int4)
      panel_rows_to<true>(job, panel, scales, n0, columns);
    else
      panel_rows_to<false>(job, panel, scales, n0, columns);
  }
}

}  // namespace qvl::kernels::detail

namespace qvl::kernels::attention_detail {

void score_int8_neon_dotprod(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
  using detail::kKeyTile;
  using detail::kScoreTile;
  int64_t j = 0;
  for (; j + kKeyTile <= keys; j += kKeyTile) detail::score_keys<kKeyTile>(op, first + j, s + j * kScoreTile);
  for (; j < keys; ++j) detail::score_keys<1>(op, first + j, s + j * kScoreTile);
}

}  // namespace qvl::kernels::attention_detail
