// The avx2 tier's int8 GEMM kernel (also the avx512 tier's on CPUs without
// AVX512-VNNI). Built with AVX2 + FMA + F16C (lib/CMakeLists.txt) and entered
// only when one of those tiers is active; it must not instantiate templates or
// inline functions other files also use (the linker could keep this file's
// AVX2 copy for everyone).
//
// AVX2 has no vpdpbusd; vpmaddubsw multiplies unsigned by signed bytes and
// adds each pair into 16 bits with saturation, so the VNNI layout's q + 128
// (up to 255 · 127 · 2 > 32767) would saturate. Instead, as the AVX2 GEMV
// (quant_avx2.cpp) does: |q| is the unsigned operand, xq with q's sign the
// signed one (vpsignb), so a pair is at most 127 · 127 · 2 = 32258 and never
// saturates; vpmaddwd by ones adds the pairs into the int32 lane of 4 k.
// The panel holds the signed q (int8_gemm_detail.h's layout without the +128),
// so the group sums are exact Σ q·xq with no correction.
//
// A tile is kTileRows rows × 16 columns (2 registers of 8 int32): 8
// accumulators, 2 panel registers and their magnitudes, a broadcast, a
// product: the 16 ymm registers. The float totals live in a small array
// touched once per group.
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/int8_gemm_detail.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::detail {
namespace {

namespace simd = simd_avx2;
#ifndef QVL_INT8_AVX2_TILE_ROWS
#define QVL_INT8_AVX2_TILE_ROWS 4
#endif
constexpr int kTileRows = QVL_INT8_AVX2_TILE_ROWS;
constexpr int kTileRegisters = 2;  // 8 columns each
constexpr int64_t kTileColumns = 8 * kTileRegisters;
static_assert(kPanelColumns % kTileColumns == 0, "a panel is a whole number of tiles");
constexpr int64_t kPanelBytesPer4 = kPanelColumns * 4;  // one 4-k step of a panel

// 8 registers of 8 int32 each, transposed: out[c] lane i = in[i] lane c.
inline void transpose8(__m256i (&v)[8]) {
  __m256i t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
  }
  // u[4i + j], 128-bit lane L: rows 4i..4i+3 of column 4L + j.
  __m256i u[8];
  for (int i = 0; i < 2; ++i) {
    u[4 * i] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);      // lane 0: column j
    v[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);  // lane 1: column 4 + j
  }
}

// Columns [n0, n0 + columns) of w as a panel (q, 4 k at a time, the 32
// columns side by side; 0 past the last column) and their scales, group by
// group (0 past the last column).
void pack_panel(const Int8Matrix& w, int64_t n0, int64_t columns, uint8_t* panel, float* scales) {
  const int64_t steps = w.padded_cols / 4;  // a multiple of 16
  if (columns == kPanelColumns) {
    // 8 rows × 32 bytes (8 steps) at a time, read sequentially and
    // transposed in registers.
    for (int z = 0; z < int(kPanelColumns / 8); ++z)
      for (int64_t s = 0; s < steps; s += 8) {
        __m256i v[8];
        for (int i = 0; i < 8; ++i)
          v[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.weights + (n0 + 8 * z + i) * w.padded_cols + 4 * s));
        transpose8(v);
        for (int c = 0; c < 8; ++c)
          _mm256_store_si256(reinterpret_cast<__m256i*>(panel + (s + c) * kPanelBytesPer4 + 32 * z), v[c]);
      }
  } else {
    for (int64_t j = 0; j < kPanelColumns; ++j) {
      uint32_t* out = reinterpret_cast<uint32_t*>(panel) + j;
      if (j >= columns) {
        for (int64_t s = 0; s < steps; ++s) out[s * kPanelColumns] = 0;
        continue;
      }
      const int8_t* row = w.weights + (n0 + j) * w.padded_cols;
      for (int64_t s = 0; s < steps; ++s) std::memcpy(&out[s * kPanelColumns], row + 4 * s, 4);
    }
  }
  const int64_t groups = w.groups();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < kPanelColumns; ++j)
      scales[g * kPanelColumns + j] = j < columns ? w.scales[(n0 + j) * groups + g] : 0.0f;
}

inline __m256i broadcast4(const int8_t* p) {
  int32_t four;
  std::memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}

// Rows [m0, m0 + R) × the tile of columns [c0, c0 + 16) of the panel (n0 the
// panel's first column; `columns` of the tile are real).
template <int R, class Out>
void tile(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t m0, int64_t n0, int64_t c0,
          int64_t columns) {
  constexpr int Z = kTileRegisters;
  const Int8Matrix& w = *job.w;
  const int64_t groups = w.groups(), steps_per_group = w.group_size / 4;
  const int8_t* x[R];
  for (int r = 0; r < R; ++r) x[r] = job.x_q + (m0 + r) * w.padded_cols;
  alignas(32) float total[R][8 * Z] = {};
  const __m256i ones = _mm256_set1_epi16(1);

  for (int64_t g = 0; g < groups; ++g) {
    __m256i dot[R][Z];
    for (int r = 0; r < R; ++r)
      for (int z = 0; z < Z; ++z) dot[r][z] = _mm256_setzero_si256();
    const uint8_t* p = panel + g * steps_per_group * kPanelBytesPer4 + 4 * c0;
    const int64_t k0 = g * w.group_size;
    for (int64_t s = 0; s < steps_per_group; ++s) {
      __m256i q[Z], magnitude[Z];
      for (int z = 0; z < Z; ++z) {
        q[z] = _mm256_load_si256(reinterpret_cast<const __m256i*>(p + s * kPanelBytesPer4 + 32 * z));
        magnitude[z] = _mm256_abs_epi8(q[z]);
      }
      for (int r = 0; r < R; ++r) {
        const __m256i xb = broadcast4(x[r] + k0 + 4 * s);
        for (int z = 0; z < Z; ++z) {
          const __m256i pairs = _mm256_maddubs_epi16(magnitude[z], _mm256_sign_epi8(xb, q[z]));
          dot[r][z] = _mm256_add_epi32(dot[r][z], _mm256_madd_epi16(pairs, ones));
        }
      }
    }
    __m256 ws[Z];
    for (int z = 0; z < Z; ++z) ws[z] = _mm256_load_ps(scales + g * kPanelColumns + c0 + 8 * z);
    for (int r = 0; r < R; ++r) {
      const __m256 xs = _mm256_set1_ps(job.x_scales[(m0 + r) * groups + g]);
      for (int z = 0; z < Z; ++z) {
        const __m256 sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][z]), _mm256_mul_ps(ws[z], xs),
                                           _mm256_load_ps(&total[r][8 * z]));
        _mm256_store_ps(&total[r][8 * z], sum);
      }
    }
  }
  if (job.bias) {
    alignas(32) float bias[8 * Z] = {};
    for (int64_t j = 0; j < 8 * Z && j < columns; ++j) bias[j] = job.bias[n0 + c0 + j];
    for (int z = 0; z < Z; ++z) {
      const __m256 b = _mm256_load_ps(&bias[8 * z]);
      for (int r = 0; r < R; ++r) _mm256_store_ps(&total[r][8 * z], _mm256_add_ps(_mm256_load_ps(&total[r][8 * z]), b));
    }
  }
  Out* y = static_cast<Out*>(job.y);
  for (int r = 0; r < R; ++r) {
    Out* row = y + (m0 + r) * job.y_stride + n0 + c0;
    for (int z = 0; z < Z; ++z) simd::store(row + 8 * z, _mm256_load_ps(&total[r][8 * z]), columns - 8 * z);
  }
}

template <class Out>
void panel_rows(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0, int64_t columns) {
  for (int64_t c0 = 0; c0 < columns; c0 += kTileColumns) {
    const int64_t tile_columns = columns - c0;
    int64_t m = 0;
    for (; m + kTileRows <= job.rows; m += kTileRows)
      tile<kTileRows, Out>(job, panel, scales, m, n0, c0, tile_columns);
    switch (job.rows - m) {
      case 5: tile<5, Out>(job, panel, scales, m, n0, c0, tile_columns); break;
      case 4: tile<4, Out>(job, panel, scales, m, n0, c0, tile_columns); break;
      case 3: tile<3, Out>(job, panel, scales, m, n0, c0, tile_columns); break;
      case 2: tile<2, Out>(job, panel, scales, m, n0, c0, tile_columns); break;
      case 1: tile<1, Out>(job, panel, scales, m, n0, c0, tile_columns); break;
      default: break;
    }
  }
}
static_assert(kTileRows <= 6, "one tail case per row count below kTileRows");

}  // namespace

void int8_gemm_panels_avx2(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  const Int8Matrix& w = *job.w;
  const size_t panel_bytes = size_t(w.padded_cols / 4 * kPanelBytesPer4);
  uint8_t* panel = int8_gemm_panel_buffer(panel_bytes + size_t(w.groups() * kPanelColumns) * sizeof(float));
  float* scales = reinterpret_cast<float*>(panel + panel_bytes);
  for (int64_t p = first_panel; p < end_panel; ++p) {
    const int64_t n0 = p * kPanelColumns;
    const int64_t columns = w.rows - n0 < kPanelColumns ? w.rows - n0 : kPanelColumns;
    if (columns <= 0) return;
    pack_panel(w, n0, columns, panel, scales);
    if (job.y_storage == Storage::F32)
      panel_rows<float>(job, panel, scales, n0, columns);
    else
      panel_rows<uint16_t>(job, panel, scales, n0, columns);
  }
}

}  // namespace qvl::kernels::detail
