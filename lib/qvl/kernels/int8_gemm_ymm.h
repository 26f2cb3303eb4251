// Internal to the 256-bit int8 GEMM kernels: the avx2 tier's
// (int8_gemm_avx2.cpp, vpmaddubsw) and the avx2-vnni tier's
// (int8_avx_vnni*.cpp, vpdpbusd). One kernel for both, parameterized by how
// 4 k of a row meet a register of weights (a `Dot` policy); the panel's
// repacking (int8_gemm_detail.h's layout), the tiles, the float epilogue and
// the stores are shared. Everything is `static` or in an unnamed namespace,
// so each file that includes this compiles its own copy with its own flags
// and no AVX2 code leaks to files compiled for a lower tier.
//
// A Dot policy provides:
//   kTileRows                     rows per tile (a tile's accumulators,
//                                 weights and temporaries fill the 16 ymm registers)
//   kFlip                         the byte XORed into every weight when packed
//                                 (0: signed q; 0x80: q + 128, unsigned)
//   Weights load(const uint8_t*)  32 packed bytes, ready for add
//   start(int32_t x_bias)         a row's group sums before its products
//   add(acc, weights, xb)         acc + the 4-byte products, per int32 lane
// so that each group's sums end at the exact Σ q·xq.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "qvl/kernels/int8_gemm_detail.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::detail::ymm_gemm {

// 8 registers of 8 int32 each, transposed: out[c] lane i = in[i] lane c.
static inline void transpose8(__m256i (&v)[8]) {
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

namespace {  // (member functions of a named namespace's struct could be shared with another tier's copy)

// 32 weights of row n from column k (a multiple of 32) as signed bytes: an
// int8 matrix's own, or an int4 matrix's levels 0..15 (a 64-column group's
// 32 bytes hold columns i and i + 32 in their low and high nibbles).
struct Int8Rows {
  const Int8Matrix& w;
  __m256i load(int64_t n, int64_t k) const {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.weights + n * w.padded_cols + k));
  }
};
struct Int4Rows {
  const Int4Matrix& w;
  __m256i load(int64_t n, int64_t k) const {
    const __m256i bytes =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.levels + n * w.row_bytes() + k / 64 * 32));
    const __m256i nibbles = k % 64 == 0 ? bytes : _mm256_srli_epi16(bytes, 4);
    return _mm256_and_si256(nibbles, _mm256_set1_epi8(0x0f));
  }
};

}  // namespace

// Columns [n0, n0 + kPanelColumns) of `rows` as a panel (4 k at a time, the
// panel's columns side by side, each byte q XOR flip): 8 rows × 32 bytes (8
// steps) at a time, read sequentially and transposed in registers.
template <class Rows>
static inline void pack_full_panel(const Rows& rows, int64_t n0, int64_t steps, uint8_t flip, uint8_t* panel) {
  const __m256i flips = _mm256_set1_epi8(char(flip));
  for (int z = 0; z < int(kPanelColumns / 8); ++z)
    for (int64_t s = 0; s < steps; s += 8) {
      __m256i v[8];
      for (int i = 0; i < 8; ++i) v[i] = rows.load(n0 + 8 * z + i, 4 * s);
      transpose8(v);
      for (int c = 0; c < 8; ++c)
        _mm256_store_si256(reinterpret_cast<__m256i*>(panel + (s + c) * kPanelBytesPer4 + 32 * z),
                           _mm256_xor_si256(v[c], flips));
    }
}

// Columns [n0, n0 + columns) of the job's weights as a panel (a column past
// the last one holds weight 0, i.e. the byte `flip`) and their scales
// (int8_gemm_detail.h). flip 0: signed q (vpmaddubsw's layout); flip 0x80:
// q + 128 as an unsigned byte (vpdpbusd's).
static inline void pack_panel(const Int8GemmJob& job, int64_t n0, int64_t columns, uint8_t flip, uint8_t* panel,
                              float* scales) {
  const int64_t steps = job.w->padded_cols / 4;  // a multiple of 16
  if (columns < kPanelColumns)
    pack_panel_portable(job, n0, columns, flip, panel);
  else if (job.int4)
    pack_full_panel(Int4Rows{*job.int4}, n0, steps, flip, panel);
  else
    pack_full_panel(Int8Rows{*job.w}, n0, steps, flip, panel);
  pack_panel_scales(job, n0, columns, scales);
}

// 4 bytes of an X row in every 32-bit lane.
static inline __m256i broadcast4(const int8_t* p) {
  int32_t four;
  std::memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}

namespace {

// The kernel's tiles and panels, for a Dot policy.
template <class Dot>
struct Kernel {
  static constexpr int kTileRegisters = 2;  // 8 columns each
  static constexpr int64_t kTileColumns = 8 * kTileRegisters;
  static_assert(kPanelColumns % kTileColumns == 0, "a panel is a whole number of tiles");
  static_assert(Dot::kTileRows <= 8, "one tail case per row count below kTileRows");

  // Rows [m0, m0 + R) × the tile of columns [c0, c0 + 16) of the panel (n0
  // the panel's first column; `columns` of the tile are real). The float
  // totals live in a small array touched once per group.
  // kOffsets: an int4 job (int8_gemm_detail.h), whose mins follow the scales.
  template <int R, class Out, bool kOffsets>
  static void tile(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t m0, int64_t n0,
                   int64_t c0, int64_t columns) {
    constexpr int Z = kTileRegisters;
    const Int8Matrix& w = *job.w;
    const int64_t groups = w.groups(), steps_per_group = w.group_size / 4;
    const int8_t* x[R];
    for (int r = 0; r < R; ++r) x[r] = job.x_q + (m0 + r) * w.padded_cols;
    alignas(32) float total[R][8 * Z] = {};

    for (int64_t g = 0; g < groups; ++g) {
      __m256i dot[R][Z];
      for (int r = 0; r < R; ++r) {
        const __m256i start = Dot::start(job.x_bias[(m0 + r) * groups + g]);
        for (int z = 0; z < Z; ++z) dot[r][z] = start;
      }
      const uint8_t* p = panel + g * steps_per_group * kPanelBytesPer4 + 4 * c0;
      const int64_t k0 = g * w.group_size;
      for (int64_t s = 0; s < steps_per_group; ++s) {
        typename Dot::Weights weights[Z];
        for (int z = 0; z < Z; ++z) weights[z] = Dot::load(p + s * kPanelBytesPer4 + 32 * z);
        for (int r = 0; r < R; ++r) {
          const __m256i xb = broadcast4(x[r] + k0 + 4 * s);
          for (int z = 0; z < Z; ++z) dot[r][z] = Dot::add(dot[r][z], weights[z], xb);
        }
      }
      __m256 ws[Z];
      for (int z = 0; z < Z; ++z) ws[z] = _mm256_load_ps(scales + g * kPanelColumns + c0 + 8 * z);
      for (int r = 0; r < R; ++r) {
        const float x_scale = job.x_scales[(m0 + r) * groups + g];
        const __m256 xs = _mm256_set1_ps(x_scale);
        for (int z = 0; z < Z; ++z) {
          __m256 sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][z]), _mm256_mul_ps(ws[z], xs),
                                       _mm256_load_ps(&total[r][8 * z]));
          if constexpr (kOffsets) {
            const __m256 offset = _mm256_set1_ps(x_scale * float(job.x_bias[(m0 + r) * groups + g] / 128));
            const __m256 mins = _mm256_load_ps(scales + (groups + g) * kPanelColumns + c0 + 8 * z);
            sum = _mm256_fmadd_ps(mins, offset, sum);
          }
          _mm256_store_ps(&total[r][8 * z], sum);
        }
      }
    }
    if (job.bias) {
      alignas(32) float bias[8 * Z] = {};
      for (int64_t j = 0; j < 8 * Z && j < columns; ++j) bias[j] = job.bias[n0 + c0 + j];
      for (int z = 0; z < Z; ++z) {
        const __m256 b = _mm256_load_ps(&bias[8 * z]);
        for (int r = 0; r < R; ++r)
          _mm256_store_ps(&total[r][8 * z], _mm256_add_ps(_mm256_load_ps(&total[r][8 * z]), b));
      }
    }
    Out* y = static_cast<Out*>(job.y);
    for (int r = 0; r < R; ++r) {
      Out* row = y + (m0 + r) * job.y_stride + n0 + c0;
      for (int z = 0; z < Z; ++z)
        simd_avx2::store(row + 8 * z, _mm256_load_ps(&total[r][8 * z]), columns - 8 * z);
    }
  }

  template <class Out, bool kOffsets>
  static void panel_rows(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0,
                         int64_t columns) {
    constexpr int kRows = Dot::kTileRows;
    for (int64_t c0 = 0; c0 < columns; c0 += kTileColumns) {
      const int64_t tile_columns = columns - c0;
      int64_t m = 0;
      for (; m + kRows <= job.rows; m += kRows) tile<kRows, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns);
      switch (job.rows - m) {
        case 7: tile<7, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        case 6: tile<6, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        case 5: tile<5, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        case 4: tile<4, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        case 3: tile<3, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        case 2: tile<2, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        case 1: tile<1, Out, kOffsets>(job, panel, scales, m, n0, c0, tile_columns); break;
        default: break;
      }
    }
  }

  template <bool kOffsets>
  static void panel_rows_to(const Int8GemmJob& job, const uint8_t* panel, const float* scales, int64_t n0,
                            int64_t columns) {
    if (job.y_storage == Storage::F32)
      panel_rows<float, kOffsets>(job, panel, scales, n0, columns);
    else
      panel_rows<uint16_t, kOffsets>(job, panel, scales, n0, columns);
  }

  // int8_gemm_detail.h's Int8GemmPanels.
  static void panels(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
    const Int8Matrix& w = *job.w;
    const auto [panel, scales] = int8_gemm_panel_scratch(w);
    for (int64_t p = first_panel; p < end_panel; ++p) {
      const int64_t n0 = p * kPanelColumns, columns = panel_columns(w, p);
      if (columns <= 0) return;
      pack_panel(job, n0, columns, Dot::kFlip, panel, scales);
      if (job.int4)
        panel_rows_to<true>(job, panel, scales, n0, columns);
      else
        panel_rows_to<false>(job, panel, scales, n0, columns);
    }
  }
};

}  // namespace

}  // namespace qvl::kernels::detail::ymm_gemm
