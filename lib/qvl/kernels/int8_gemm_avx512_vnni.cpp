// The avx512 tier's int8 GEMM kernel for CPUs with AVX512-VNNI (layout:
// int8_gemm_detail.h). Built with AVX-512 + AVX512-VNNI (lib/CMakeLists.txt)
// and entered only when that tier is active on such a CPU; it must not
// instantiate templates or inline functions other files also use (the
// linker could keep this file's AVX-512 copy for everyone).
//
// A tile of kTileRows rows × 32 columns keeps 2·kTileRows int32 accumulators
// (one group's exact dot products) and as many float totals in registers;
// per 4 k, two 64-byte panel loads serve every row of the tile, and each row's
// 4 bytes, broadcast once, meet both (dot_product_asm.h keeps GCC from
// copying the accumulators around each vpdpbusd).
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/dot_product_asm.h"
#include "qvl/kernels/int8_gemm_detail.h"
#include "qvl/kernels/simd_avx512.h"

namespace qvl::kernels::detail {
namespace {

namespace simd = simd_avx512;
// 6 rows × 2 registers (32 columns): 12 + 12 accumulators, 2 weight
// registers and a broadcast fit the 32 registers. Measured on an AMD EPYC family 25 model 17 (1
// thread, interleaved with bf16, busy machine) against 4×3, 3×4 and 8×2
// (spills): as fast or faster on the gate/up/down shapes that dominate.
#ifndef QVL_INT8_TILE_ROWS
#define QVL_INT8_TILE_ROWS 6
#endif
constexpr int kTileRows = QVL_INT8_TILE_ROWS;
constexpr int Z = kPanelRegisters;

// 16 registers of 16 int32 each, transposed: out[c] lane i = in[i] lane c.
inline void transpose16(__m512i (&v)[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j.
  __m512i u[16];
  for (int i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i even_a = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd_a = _mm512_shuffle_i32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i even_b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd_b = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 1, 3, 1));
    v[j] = _mm512_shuffle_i32x4(even_a, even_b, _MM_SHUFFLE(2, 0, 2, 0));      // lane 0
    v[4 + j] = _mm512_shuffle_i32x4(odd_a, odd_b, _MM_SHUFFLE(2, 0, 2, 0));    // lane 1
    v[8 + j] = _mm512_shuffle_i32x4(even_a, even_b, _MM_SHUFFLE(3, 1, 3, 1));  // lane 2
    v[12 + j] = _mm512_shuffle_i32x4(odd_a, odd_b, _MM_SHUFFLE(3, 1, 3, 1));   // lane 3
  }
}

// 64 weights of row n from column k (a multiple of 64) as signed bytes: an
// int8 matrix's own, or an int4 matrix's levels 0..15 (one group: its 32
// bytes hold columns i and i + 32 in their low and high nibbles).
struct Int8Rows {
  const Int8Matrix& w;
  __m512i load(int64_t n, int64_t k) const { return _mm512_loadu_si512(w.weights + n * w.padded_cols + k); }
};
struct Int4Rows {
  const Int4Matrix& w;
  __m512i load(int64_t n, int64_t k) const {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.levels + n * w.row_bytes() + k / 2));
    const __m256i low = _mm256_set1_epi8(0x0f);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(bytes, low)),
                              _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low), 1);
  }
};

// Columns [n0, n0 + kPanelColumns) of `rows` as a panel (q + 128, 4 k at a
// time, the 32 columns side by side): 16 rows × 64 bytes (16 steps) at a
// time, read sequentially and transposed in registers: measured ~4x faster
// than moving 4 bytes at a time (and than gathering), 5-9 % of a 512-row
// product before.
template <class Rows>
void pack_full_panel(const Rows& rows, int64_t n0, int64_t steps, uint8_t* panel) {
  const __m512i flip = _mm512_set1_epi32(int32_t(0x80808080u));
  for (int z = 0; z < Z; ++z)
    for (int64_t s = 0; s < steps; s += 16) {
      __m512i v[16];
      for (int i = 0; i < 16; ++i) v[i] = rows.load(n0 + 16 * z + i, 4 * s);
      transpose16(v);
      for (int c = 0; c < 16; ++c)
        _mm512_store_si512(panel + (s + c) * kPanelBytesPer4 + 64 * z, _mm512_xor_si512(v[c], flip));
    }
}

// Columns [n0, n0 + columns) of the job's weights as a panel (128 past the
// last column, i.e. weight 0) and their scales (int8_gemm_detail.h).
void pack_panel(const Int8GemmJob& job, int64_t n0, int64_t columns, uint8_t* panel, float* scales) {
  const int64_t steps = job.w->padded_cols / 4;  // a multiple of 16
  if (columns < kPanelColumns)
    pack_panel_portable(job, n0, columns, 0x80, panel);
  else if (job.int4)
    pack_full_panel(Int4Rows{*job.int4}, n0, steps, panel);
  else
    pack_full_panel(Int8Rows{*job.w}, n0, steps, panel);
  pack_panel_scales(job, n0, columns, scales);
}

inline __m512i broadcast4(const int8_t* p) {
  int32_t four;
  std::memcpy(&four, p, 4);
  return _mm512_set1_epi32(four);
}

// kOffsets: an int4 job (int8_gemm_detail.h), whose mins follow the scales.
template <int R, class Out, bool kOffsets>
void tile(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t m0, int64_t n0,
          int64_t columns) {
  const Int8Matrix& w = *job.w;
  const int64_t groups = w.groups(), steps_per_group = w.group_size / 4;
  const int8_t* x[R];
  for (int r = 0; r < R; ++r) x[r] = job.x_q + (m0 + r) * w.padded_cols;
  __m512 total[R][Z];
  for (int r = 0; r < R; ++r)
    for (int z = 0; z < Z; ++z) total[r][z] = _mm512_setzero_ps();

  for (int64_t g = 0; g < groups; ++g) {
    // Each row's sums start at −128·Σxq of the group (undoing the +128 of
    // the weights), so the group ends with the exact Σ q·xq: integer
    // arithmetic, whatever the order (|sum| <= 128·255·127 per group).
    __m512i dot[R][Z];
    for (int r = 0; r < R; ++r) {
      const __m512i start = _mm512_set1_epi32(-job.x_bias[(m0 + r) * groups + g]);
      for (int z = 0; z < Z; ++z) dot[r][z] = start;
    }
    const uint8_t* p = panel + g * steps_per_group * kPanelBytesPer4;
    const int64_t k0 = g * w.group_size;
    for (int64_t s = 0; s < steps_per_group; ++s) {
      __m512i weights[Z];
      for (int z = 0; z < Z; ++z) weights[z] = _mm512_load_si512(p + s * kPanelBytesPer4 + 64 * z);
      for (int r = 0; r < R; ++r) {
        const __m512i xb = broadcast4(x[r] + k0 + 4 * s);
        for (int z = 0; z < Z; ++z) dot[r][z] = dot_asm::dpbusd512(dot[r][z], weights[z], xb);
      }
    }
    __m512 ws[Z], mins[Z];
    for (int z = 0; z < Z; ++z) ws[z] = _mm512_load_ps(scales + g * kPanelColumns + 16 * z);
    if constexpr (kOffsets)
      for (int z = 0; z < Z; ++z) mins[z] = _mm512_load_ps(scales + (groups + g) * kPanelColumns + 16 * z);
    for (int r = 0; r < R; ++r) {
      const float x_scale = job.x_scales[(m0 + r) * groups + g];
      const __m512 xs = _mm512_set1_ps(x_scale);
      for (int z = 0; z < Z; ++z)
        total[r][z] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][z]), _mm512_mul_ps(ws[z], xs), total[r][z]);
      if constexpr (kOffsets) {
        const __m512 offset = _mm512_set1_ps(x_scale * float(job.x_bias[(m0 + r) * groups + g] / 128));
        for (int z = 0; z < Z; ++z) total[r][z] = _mm512_fmadd_ps(mins[z], offset, total[r][z]);
      }
    }
  }
  if (job.bias) {
    for (int z = 0; z < Z; ++z) {
      const __m512 b = _mm512_maskz_loadu_ps(simd::tail_mask(columns - 16 * z), job.bias + n0 + 16 * z);
      for (int r = 0; r < R; ++r) total[r][z] = _mm512_add_ps(total[r][z], b);
    }
  }
  Out* y = static_cast<Out*>(job.y);
  for (int r = 0; r < R; ++r) {
    Out* row = y + (m0 + r) * job.y_stride + n0;
    for (int z = 0; z < Z; ++z) simd::store(row + 16 * z, total[r][z], simd::tail_mask(columns - 16 * z));
  }
}

template <class Out, bool kOffsets>
void panel_rows(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0, int64_t columns) {
  int64_t m = 0;
  for (; m + kTileRows <= job.rows; m += kTileRows) tile<kTileRows, Out, kOffsets>(job, panel, scales, m, n0, columns);
  switch (job.rows - m) {
    case 7: return tile<7, Out, kOffsets>(job, panel, scales, m, n0, columns);
    case 6: return tile<6, Out, kOffsets>(job, panel, scales, m, n0, columns);
    case 5: return tile<5, Out, kOffsets>(job, panel, scales, m, n0, columns);
    case 4: return tile<4, Out, kOffsets>(job, panel, scales, m, n0, columns);
    case 3: return tile<3, Out, kOffsets>(job, panel, scales, m, n0, columns);
    case 2: return tile<2, Out, kOffsets>(job, panel, scales, m, n0, columns);
    case 1: return tile<1, Out, kOffsets>(job, panel, scales, m, n0, columns);
    default: return;
  }
}

template <bool kOffsets>
void panel_rows_to(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0, int64_t columns) {
  if (job.y_storage == Storage::F32)
    panel_rows<float, kOffsets>(job, panel, scales, n0, columns);
  else
    panel_rows<uint16_t, kOffsets>(job, panel, scales, n0, columns);
}
static_assert(kTileRows <= 8, "one tail case per row count below kTileRows");

template <class In>
void quantize_rows(const Int8GemmJob& job, const In* x, int64_t x_stride, int64_t begin, int64_t end) {
  const Int8Matrix& w = *job.w;
  const int64_t groups = w.groups();
  for (int64_t m = begin; m < end; ++m) {
    const In* row = x + m * x_stride;
    int8_t* q = job.x_q + m * w.padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = g * w.group_size, last = first + w.group_size < w.cols ? first + w.group_size : w.cols;
      __m512 max_abs = _mm512_setzero_ps();
      for (int64_t k = first; k < last; k += 16)
        max_abs = _mm512_max_ps(max_abs, _mm512_abs_ps(simd::load(row + k, simd::tail_mask(last - k))));
      const float scale = _mm512_reduce_max_ps(max_abs) / 127.0f;
      job.x_scales[m * groups + g] = scale;
      if (scale == 0.0f) {
        std::memset(q + first, 0, size_t(w.group_size));
        job.x_bias[m * groups + g] = 0;
        continue;
      }
      const __m512 divisor = _mm512_set1_ps(scale), low = _mm512_set1_ps(-127.0f), high = _mm512_set1_ps(127.0f);
      __m512i sum = _mm512_setzero_si512();
      // The whole group, its padding too (zeros load as 0 and stay 0).
      for (int64_t k = first; k < first + w.group_size; k += 16) {
        const __m512 v = simd::load(row + k, simd::tail_mask(last - k));
        const __m512 level = _mm512_roundscale_ps(_mm512_div_ps(v, divisor), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m512i levels = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(level, low), high));
        sum = _mm512_add_epi32(sum, levels);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtepi32_epi8(levels));
      }
      job.x_bias[m * groups + g] = 128 * _mm512_reduce_add_epi32(sum);
    }
  }
}

}  // namespace

void int8_quantize_rows_avx512_vnni(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                                    int64_t begin, int64_t end) {
  if (x_storage == Storage::F32)
    quantize_rows(job, static_cast<const float*>(x), x_stride, begin, end);
  else
    quantize_rows(job, static_cast<const uint16_t*>(x), x_stride, begin, end);
}

void int8_gemm_panels_avx512_vnni(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  const Int8Matrix& w = *job.w;
  const auto [panel, scales] = int8_gemm_panel_scratch(w);
  for (int64_t p = first_panel; p < end_panel; ++p) {
    const int64_t n0 = p * kPanelColumns, columns = panel_columns(w, p);
    if (columns <= 0) return;
    pack_panel(job, n0, columns, panel, scales);
    if (job.int4)
      panel_rows_to<true>(job, panel, scales, n0, columns);
    else
      panel_rows_to<false>(job, panel, scales, n0, columns);
  }
}

}  // namespace qvl::kernels::detail
