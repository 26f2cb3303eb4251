// Internal to lib/qvl/kernels: what int8_gemm.cpp shares with its per-tier
// kernels.
//
// The weights are repacked a panel of kPanelColumns output columns at a time
// (by each thread, for the panels it owns, into a buffer that stays in its L2
// cache): for every 4 consecutive k, the panel's columns side by side, 4 bytes
// each, as unsigned bytes q + 128 — the layout in which one vpdpbusd
// multiplies a broadcast 4-byte piece of an X row by 16 columns at once.
// vpdpbusd multiplies unsigned by signed bytes, so the signed X is the
// broadcast operand and the weights carry the +128: sum (q+128)·xq =
// sum q·xq + 128·sum xq, and x_bias holds that 128·sum xq per row and group.
#pragma once
#include <cstddef>
#include <cstdint>

#include "qvl/kernels/quant.h"
#include "qvl/kernels/quant4.h"
#include "qvl/kernels/storage.h"

namespace qvl::kernels::detail {

#ifndef QVL_INT8_PANEL_REGISTERS  // (a build-time knob for measuring other widths)
#define QVL_INT8_PANEL_REGISTERS 2
#endif
constexpr int kPanelRegisters = QVL_INT8_PANEL_REGISTERS;  // 16 int32 columns each
constexpr int64_t kPanelColumns = 16 * kPanelRegisters;
constexpr int64_t kPanelBytesPer4 = kPanelColumns * 4;  // one 4-k step of a panel

struct Int8GemmJob {
  const Int8Matrix* w;
  int64_t rows;            // of X and Y
  int8_t* x_q;             // rows × w->padded_cols, zero past w->cols
  float* x_scales;         // rows × groups
  int32_t* x_bias;         // rows × groups: 128 · sum of the group's x_q
  void* y;
  Storage y_storage;
  int64_t y_stride;
  const float* bias;       // w->rows values added to the sums before rounding, or null
  // gemm_int4: the weights are these 4-bit levels u with w = u · scale + min
  // (quant4.h), and *w gives only the shape (no weights or scales). A panel
  // packs the levels as the bytes q = u, and each group adds
  // min · x_scale · Σ xq to the float sum after its dot product (the offset's
  // share, Σ xq being x_bias / 128 on every tier).
  const Int4Matrix* int4 = nullptr;
};

// Quantizes rows [begin, end) of X (rows x_stride elements apart) into the
// job's x_q, x_scales and x_bias: per group of w.group_size, scale =
// max|x| / 127, xq = round-half-even(x / scale) (every tier the same bits).
using Int8QuantizeRows = void (*)(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                                  int64_t begin, int64_t end);
void int8_quantize_rows_generic(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                                int64_t begin, int64_t end);
void int8_quantize_rows_avx512_vnni(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                                    int64_t begin, int64_t end);
// (int8_gemm_avx2.cpp: for the avx2 and avx2-vnni tiers, and avx512 without VNNI.)
void int8_quantize_rows_avx2(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                             int64_t begin, int64_t end);

// Packing a panel of the job's weights, portably: its bytes 4 at a time,
// each byte q XOR flip (a column past the last is weight 0, i.e. the byte
// `flip`; the x86 tiers use this for partial panels and transpose full ones
// in registers); an int4 job's levels are unpacked to bytes first, into the
// calling thread's buffer. And its scales group by group (0 past the last
// column), followed for an int4 job by its offsets (mins) laid out alike.
void pack_panel_portable(const Int8GemmJob& job, int64_t n0, int64_t columns, uint8_t flip, uint8_t* panel);
void pack_panel_scales(const Int8GemmJob& job, int64_t n0, int64_t columns, float* scales);

// The calling thread's buffer for one panel of w and its scales, 64-byte
// aligned, kept for its next call. Throws qvl::Error when out of memory.
struct PanelScratch {
  uint8_t* panel;  // w.padded_cols / 4 steps of kPanelBytesPer4
  float* scales;   // w.groups() × kPanelColumns, then as many offsets (int4 jobs' mins)
};
PanelScratch int8_gemm_panel_scratch(const Int8Matrix& w);

// How many of panel p's kPanelColumns columns w has (≤ 0: none).
inline int64_t panel_columns(const Int8Matrix& w, int64_t p) {
  const int64_t left = w.rows - p * kPanelColumns;
  return left < kPanelColumns ? left : kPanelColumns;
}

// Computes Y's columns [first_panel, end_panel) · kPanelColumns (clipped to
// w->rows) for all rows.
using Int8GemmPanels = void (*)(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);
void int8_gemm_panels_generic(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);
// Entered only when the avx512 tier is active on a CPU with AVX512-VNNI.
void int8_gemm_panels_avx512_vnni(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);
// Entered only when the avx2 tier is active, or the avx512 tier on a CPU
// without AVX512-VNNI (int8_gemm_avx2.cpp: a panel of signed q, no +128, and
// x_bias unused).
void int8_gemm_panels_avx2(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);
// Entered only when the avx2-vnni tier is active (int8_avx_vnni.cpp: the
// 256-bit VNNI kernel, avx2_vnni_kernels.h over int8_gemm_ymm.h, with AVX-VNNI's encoding;
// int8_avx_vnni_evex.cpp: with AVX512-VNNI+VL's, on CPUs that have those instead).
void int8_gemm_panels_avx_vnni(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);
void int8_gemm_panels_avx_vnni_evex(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);
// Entered only when the neon tier is active on a CPU with the dot-product
// extension (int8_neon_dotprod.cpp: signed q, x_bias unused).
void int8_gemm_panels_neon_dotprod(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel);

}  // namespace qvl::kernels::detail
