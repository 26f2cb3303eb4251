// The int8 GEMM's dispatch, the quantization of X and the portable kernel
// (the tiers' own: int8_gemm_avx512_vnni.cpp, int8_avx_vnni*.cpp,
// int8_gemm_avx2.cpp, int8_neon_dotprod.cpp).
#include "qvl/kernels/int8_gemm.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"
#include "qvl/kernels/int8_gemm_detail.h"
#include "qvl/kernels/parallel.h"

namespace qvl::kernels {

using namespace detail;

namespace {

// v rounded to the nearest integer, ties to even (|v| < 2^22), as quant.cpp's
// GEMV rounds its x: the two paths quantize a row alike.
inline float round_half_even(float v) {
  constexpr float kShifter = 12582912.0f;  // 1.5 · 2^23
  return (v + kShifter) - kShifter;
}

// One row of X: per group, scale = max|x| / 127, xq = round(x / scale), and
// 128 · sum xq for the VNNI kernel's correction. Zero past cols.
void quantize_row(const float* values, const Int8Matrix& w, int8_t* x_q, float* scales, int32_t* bias) {
  std::fill(x_q + w.cols, x_q + w.padded_cols, int8_t(0));
  for (int64_t g = 0; g < w.groups(); ++g) {
    // (An int4 matrix's padding can be a whole group past cols: first > cols.)
    const int64_t first = g * w.group_size, last = std::max(first, std::min(first + w.group_size, w.cols));
    float max_abs = 0.0f;
    for (int64_t k = first; k < last; ++k) max_abs = std::max(max_abs, std::fabs(values[k]));
    const float scale = max_abs / 127.0f;
    scales[g] = scale;
    int32_t sum = 0;
    if (scale == 0.0f) {
      std::fill(x_q + first, x_q + last, int8_t(0));
    } else {
      for (int64_t k = first; k < last; ++k) {
        x_q[k] = int8_t(std::clamp(round_half_even(values[k] / scale), -127.0f, 127.0f));
        sum += x_q[k];
      }
    }
    bias[g] = 128 * sum;
  }
}

thread_local std::vector<int8_t> x_q_buffer;
thread_local std::vector<float> x_scales_buffer;
thread_local std::vector<int32_t> x_bias_buffer;

struct TierKernels {
  Int8QuantizeRows quantize;
  Int8GemmPanels panels;
};

TierKernels kernels_for(Isa isa) {
#if QVL_X86
  if (isa == Isa::Avx512 && cpu_features().avx512_vnni)
    return {int8_quantize_rows_avx512_vnni, int8_gemm_panels_avx512_vnni};
  if (isa == Isa::Avx2Vnni)
    return {int8_quantize_rows_avx2,
            cpu_features().avx_vnni ? int8_gemm_panels_avx_vnni : int8_gemm_panels_avx_vnni_evex};
  if (isa == Isa::Avx2 || isa == Isa::Avx512) return {int8_quantize_rows_avx2, int8_gemm_panels_avx2};
#elif defined(__aarch64__)
  if (isa == Isa::Neon && cpu_features().neon_dotprod)
    return {int8_quantize_rows_generic, int8_gemm_panels_neon_dotprod};
#endif
  (void)isa;
  return {int8_quantize_rows_generic, int8_gemm_panels_generic};
}

}  // namespace

namespace detail {

PanelScratch int8_gemm_panel_scratch(const Int8Matrix& w) {
  struct FreeAligned {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<uint8_t, FreeAligned> buffer;
  thread_local size_t capacity = 0;
  const size_t panel_bytes = size_t(w.padded_cols / 4 * kPanelBytesPer4);
  const size_t bytes = panel_bytes + 2 * size_t(w.groups() * kPanelColumns) * sizeof(float);  // scales, mins
  if (bytes > capacity) {
    buffer.reset(static_cast<uint8_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
    capacity = buffer ? bytes : 0;
    if (!buffer) throw Error(fmt::format("gemm_int8: out of memory for a {}-byte weight panel", bytes));
  }
  return {buffer.get(), reinterpret_cast<float*>(buffer.get() + panel_bytes)};
}

namespace {

// The int8 rows a panel of columns [n0, n0 + columns) reads: the job's own
// weights, or for an int4 job those columns' levels unpacked (one byte each,
// 0..15) with their scales as floats, into the calling thread's buffer,
// numbered from 0.
struct PanelSource {
  const Int8Matrix* w;
  int64_t n0;  // the panel's first column in *w
};
PanelSource panel_source(const Int8GemmJob& job, int64_t n0, int64_t columns) {
  if (!job.int4) return {job.w, n0};
  const Int4Matrix& w = *job.int4;
  const int64_t groups = w.groups(), half = kInt4GroupSize / 2;
  thread_local std::vector<int8_t> levels;
  thread_local std::vector<float> scales;
  thread_local Int8Matrix unpacked;
  levels.resize(size_t(columns * w.padded_cols));
  scales.resize(size_t(columns * groups));
  for (int64_t j = 0; j < columns; ++j) {
    // quant4.h's layout: byte i of a group holds columns i and i + 32.
    const uint8_t* packed = w.levels + (n0 + j) * w.row_bytes();
    int8_t* out = levels.data() + j * w.padded_cols;
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t i = 0; i < half; ++i) {
        const uint8_t byte = packed[g * half + i];
        out[g * kInt4GroupSize + i] = int8_t(byte & 0x0f);
        out[g * kInt4GroupSize + half + i] = int8_t(byte >> 4);
      }
    for (int64_t g = 0; g < groups; ++g)
      scales[size_t(j * groups + g)] = f16_to_float(w.params[((n0 + j) * groups + g) * 2]);
  }
  unpacked = Int8Matrix{levels.data(), scales.data(), columns, w.cols, w.padded_cols, kInt4GroupSize};
  return {&unpacked, 0};
}

}  // namespace

void pack_panel_portable(const Int8GemmJob& job, int64_t n0, int64_t columns, uint8_t flip, uint8_t* panel) {
  const auto [w, first] = panel_source(job, n0, columns);
  const int64_t steps = w->padded_cols / 4;
  const uint32_t flip4 = uint32_t(flip) * 0x01010101u;
  for (int64_t j = 0; j < kPanelColumns; ++j) {
    uint32_t* out = reinterpret_cast<uint32_t*>(panel) + j;
    for (int64_t s = 0; s < steps; ++s) {
      uint32_t four = 0;
      if (j < columns) std::memcpy(&four, w->weights + (first + j) * w->padded_cols + 4 * s, 4);
      out[s * kPanelColumns] = four ^ flip4;
    }
  }
}

void pack_panel_scales(const Int8GemmJob& job, int64_t n0, int64_t columns, float* scales) {
  const int64_t groups = job.w->groups();
  for (int64_t j = 0; j < kPanelColumns; ++j) {
    if (job.int4) {
      // {scale, min} per group as float16; the mins after the scales.
      const uint16_t* params = j < columns ? job.int4->params + (n0 + j) * groups * 2 : nullptr;
      for (int64_t g = 0; g < groups; ++g) {
        scales[g * kPanelColumns + j] = params ? f16_to_float(params[2 * g]) : 0.0f;
        scales[(groups + g) * kPanelColumns + j] = params ? f16_to_float(params[2 * g + 1]) : 0.0f;
      }
    } else {
      for (int64_t g = 0; g < groups; ++g)
        scales[g * kPanelColumns + j] = j < columns ? job.w->scales[(n0 + j) * groups + g] : 0.0f;
    }
  }
}

void int8_quantize_rows_generic(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                                int64_t begin, int64_t end) {
  const Int8Matrix& w = *job.w;
  std::vector<float> values(size_t(w.cols));
  for (int64_t m = begin; m < end; ++m) {
    for (int64_t k = 0; k < w.cols; ++k)
      values[size_t(k)] = x_storage == Storage::F32 ? static_cast<const float*>(x)[m * x_stride + k]
                                                    : bf16_to_float(static_cast<const uint16_t*>(x)[m * x_stride + k]);
    quantize_row(values.data(), w, job.x_q + m * w.padded_cols, job.x_scales + m * w.groups(),
                 job.x_bias + m * w.groups());
  }
}

// Column by column, row by row: each group's dot product in integers, then
// the same float accumulation as the VNNI kernel (total += dot · (w_scale ·
// x_scale), group by group), with separate rounding where the target has no FMA.
void int8_gemm_panels_generic(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  const int64_t groups = job.w->groups();
  const int64_t first = first_panel * kPanelColumns, end = std::min(job.w->rows, end_panel * kPanelColumns);
  for (int64_t n = first; n < end; ++n) {
    const auto [w, row] = panel_source(job, n, 1);  // an int4 job's row, unpacked
    const int8_t* q = w->weights + row * w->padded_cols;
    for (int64_t m = 0; m < job.rows; ++m) {
      const int8_t* xq = job.x_q + m * w->padded_cols;
      float total = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * w->group_size; k < (g + 1) * w->group_size; ++k) dot += int16_t(q[k]) * int16_t(xq[k]);
        const float x_scale = job.x_scales[m * groups + g];
        total = float(dot) * (w->scales[row * groups + g] * x_scale) + total;
        if (job.int4) {
          const float min = f16_to_float(job.int4->params[(n * groups + g) * 2 + 1]);
          total = min * (x_scale * float(job.x_bias[m * groups + g] / 128)) + total;
        }
      }
      if (job.bias) total += job.bias[n];
      if (job.y_storage == Storage::F32)
        static_cast<float*>(job.y)[m * job.y_stride + n] = total;
      else
        static_cast<uint16_t*>(job.y)[m * job.y_stride + n] = float_to_bf16(total);
    }
  }
}

}  // namespace detail

bool gemm_int8_is_fast(Isa isa) { return kernels_for(isa).panels != int8_gemm_panels_generic; }
bool gemm_int8_uses_vnni(Isa isa) {
#if QVL_X86
  const Int8GemmPanels panels = kernels_for(isa).panels;
  return panels == int8_gemm_panels_avx512_vnni || panels == int8_gemm_panels_avx_vnni ||
         panels == int8_gemm_panels_avx_vnni_evex;
#else
  (void)isa;
  return false;
#endif
}
bool gemm_int4_is_fast(Isa isa) { return gemm_int8_is_fast(isa); }

namespace {

// gemm_int8 and gemm_int4: w is the weights, or for int4 only their shape.
void run_gemm(const char* name, const Int8Matrix& w, const Int4Matrix* int4, const void* x, Storage x_storage,
              int64_t x_stride, int64_t rows, void* y, Storage y_storage, int64_t y_stride, const float* bias,
              Isa isa) {
  require_isa(isa, name);
  if (rows < 0) throw Error(fmt::format("{}: negative row count {}", name, rows));
  if (rows > 1 && (x_stride < w.cols || y_stride < w.rows))
    throw Error(fmt::format("{}: row strides {} (x) and {} (y) are shorter than the rows ({}, {})", name, x_stride,
                            y_stride, w.cols, w.rows));
  if (rows == 0 || w.rows == 0) return;

  const int64_t groups = w.groups();
  x_q_buffer.resize(size_t(rows * w.padded_cols));
  x_scales_buffer.resize(size_t(rows * groups));
  x_bias_buffer.resize(size_t(rows * groups));
  Int8GemmJob job{&w, rows, x_q_buffer.data(), x_scales_buffer.data(), x_bias_buffer.data(),
                  y,  y_storage, y_stride, bias, int4};
  const TierKernels kernels = kernels_for(isa);
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, w.cols)),
               [&](int64_t begin, int64_t end) { kernels.quantize(job, x, x_storage, x_stride, begin, end); });

  const int64_t panels = (w.rows + kPanelColumns - 1) / kPanelColumns;
  // Pieces of at least ~1 M multiply-adds, claimed by the threads in turn
  // (a 512-row prefill: one panel, ~33 M, per claim).
  const int64_t chunk = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(1, rows * w.padded_cols * kPanelColumns));
  parallel_claim(panels, chunk, [&](int64_t begin, int64_t end) { kernels.panels(job, begin, end); });
}

}  // namespace

void gemm_int8(const Int8Matrix& w, const void* x, Storage x_storage, int64_t x_stride, int64_t rows, void* y,
               Storage y_storage, int64_t y_stride, const float* bias, Isa isa) {
  validate_int8_layout(w, "gemm_int8");
  run_gemm("gemm_int8", w, nullptr, x, x_storage, x_stride, rows, y, y_storage, y_stride, bias, isa);
}

void gemm_int4(const Int4Matrix& w, const void* x, Storage x_storage, int64_t x_stride, int64_t rows, void* y,
               Storage y_storage, int64_t y_stride, const float* bias, Isa isa) {
  validate_int4_layout(w, "gemm_int4");
  const Int8Matrix shape{nullptr, nullptr, w.rows, w.cols, w.padded_cols, w.group_size};
  run_gemm("gemm_int4", shape, &w, x, x_storage, x_stride, rows, y, y_storage, y_stride, bias, isa);
}

}  // namespace qvl::kernels
