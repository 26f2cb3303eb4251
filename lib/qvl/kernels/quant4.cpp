// 4-bit weights: float16 conversions, quantizing, dequantizing, and the GEMV's
// dispatch, x preparation and portable kernel (the others are in
// quant4_avx2.cpp and quant4_avx512_vnni.cpp, each built with its tier's flags).
#include "qvl/kernels/quant4.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/parallel.h"
#include "qvl/kernels/quant4_detail.h"
#include "qvl/kernels/simd_portable.h"

namespace qvl::kernels {

using namespace detail;

namespace {

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
float float_of(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace

uint16_t float_to_f16(float value) {
  const uint32_t bits = bits_of(value);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (magnitude < 0x38800000u) {
    // Below float16's smallest normal (2^-14): multiples of 2^-24, rounded
    // to nearest even by the FPU (1024 · 2^-24 is the smallest normal's bits).
    return uint16_t(sign | uint16_t(std::nearbyint(float_of(magnitude) * 16777216.0f)));
  }
  const uint32_t rebiased = magnitude - (uint32_t(127 - 15) << 23);
  const uint32_t rounded = (rebiased + 0xfffu + ((rebiased >> 13) & 1u)) >> 13;
  return uint16_t(sign | std::min<uint32_t>(rounded, 0x7bffu));  // saturate at 65504
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) return float_of(sign) + (sign ? -1.0f : 1.0f) * float(mantissa) * (1.0f / 16777216.0f);
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));
  return float_of(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

void validate_int4_layout(const Int4Matrix& m, const std::string& what) {
  if (m.rows < 0 || m.cols < 0) throw Error(fmt::format("{}: negative shape {}x{}", what, m.rows, m.cols));
  if (m.group_size != kInt4GroupSize)
    throw Error(fmt::format("{}: group size {} (this build uses {})", what, m.group_size, kInt4GroupSize));
  if (m.cols > (int64_t(1) << 40) || m.padded_cols > (int64_t(1) << 40) ||
      (m.padded_cols > 0 && m.rows > (int64_t(1) << 40) / m.padded_cols))
    throw Error(fmt::format("{}: implausibly large shape {}x{}", what, m.rows, m.padded_cols));
  const int64_t expected = std::max<int64_t>(kInt4Chunk, (m.cols + kInt4Chunk - 1) / kInt4Chunk * kInt4Chunk);
  if (m.padded_cols != expected)
    throw Error(fmt::format("{}: padded width {} does not fit {} columns in chunks of {}", what, m.padded_cols,
                            m.cols, kInt4Chunk));
}

void QuantizedInt4Matrix::FreeAligned::operator()(void* p) const { std::free(p); }

QuantizedInt4Matrix::QuantizedInt4Matrix(int64_t rows, int64_t cols) {
  view_.rows = rows;
  view_.cols = cols;
  view_.padded_cols = std::max<int64_t>(kInt4Chunk, (cols + kInt4Chunk - 1) / kInt4Chunk * kInt4Chunk);
  validate_int4_layout(view_, fmt::format("int4 matrix {}x{}", rows, cols));
  const auto align = [](size_t n) { return (n + 63) / 64 * 64; };
  const size_t level_bytes = align(view_.level_bytes());
  const size_t total = align(level_bytes + view_.param_bytes());
  storage_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(total, 64))));
  if (!storage_) throw Error(fmt::format("int4 matrix {}x{}: out of memory ({} bytes)", rows, cols, total));
  std::memset(storage_.get(), 0, total);
  view_.levels = storage_.get();
  view_.params = reinterpret_cast<const uint16_t*>(storage_.get() + level_bytes);
}

namespace {

// v rounded to the nearest integer, ties to even, for |v| < 2^22 (see quant.cpp):
// std::nearbyint is a libm call per element on baseline x86-64, which made
// quantizing the 2B decoder take minutes; this vectorizes.
inline float round_half_even(float v) {
  constexpr float kShifter = 12582912.0f;  // 1.5 · 2^23
  return (v + kShifter) - kShifter;
}

// Range shrink factors tried per group (quant4.h): 1, 0.99, ..., 0.81.
constexpr int kShrinkSteps = 20;

struct GroupFit {
  uint16_t scale = 0, min = 0;
  float error = 0;
};

// The levels u = round((v - min) / scale) clamped to 0..15, for float16
// scale and min; returns the squared error of u · scale + min.
float fit_levels(const float* v, int64_t n, float scale, float min, uint8_t* u) {
  const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
  float error = 0;
  for (int64_t k = 0; k < n; ++k) {
    // (v - min) / scale is within about ±20 for any range tried.
    const float level = std::clamp(round_half_even((v[k] - min) * inverse), 0.0f, 15.0f);
    u[k] = uint8_t(level);
    const float d = level * scale + min - v[k];
    error += d * d;
  }
  return error;
}

// The best of the shrunk ranges for one group's n values (n >= 1).
GroupFit fit_group(const float* v, int64_t n, uint8_t* u) {
  float lo = v[0], hi = v[0];
  for (int64_t k = 1; k < n; ++k) {
    lo = std::min(lo, v[k]);
    hi = std::max(hi, v[k]);
  }
  GroupFit best;
  best.error = INFINITY;
  uint8_t trial[kInt4GroupSize];
  for (int step = 0; step < kShrinkSteps; ++step) {
    const float factor = 1.0f - 0.01f * float(step);
    const uint16_t scale = float_to_f16((hi - lo) * factor / 15.0f), min = float_to_f16(lo * factor);
    const float error = fit_levels(v, n, f16_to_float(scale), f16_to_float(min), trial);
    if (error < best.error) {
      best = {scale, min, error};
      std::memcpy(u, trial, size_t(n));
    }
    if (hi == lo) break;  // a constant group: min alone is exact
  }
  return best;
}

}  // namespace

QuantizedInt4Matrix quantize_int4(const Bf16Matrix& w) {
  QuantizedInt4Matrix out(w.rows, w.cols);
  const Int4Matrix& layout = out.view();
  uint8_t* levels = out.levels();
  uint16_t* params = out.params();
  for_row_ranges(w.rows, w.cols * 2 * kShrinkSteps, [&](int64_t begin, int64_t end) {
    float values[kInt4GroupSize];
    uint8_t u[kInt4GroupSize];
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t g = 0; g < layout.groups(); ++g) {
        const int64_t first = g * kInt4GroupSize, n = std::min(kInt4GroupSize, w.cols - first);
        if (n <= 0) continue;  // padding: levels, scale and min stay zero
        for (int64_t k = 0; k < n; ++k) values[k] = bf16_to_float(w.data[row * w.cols + first + k]);
        std::fill(u, u + kInt4GroupSize, uint8_t(0));
        const GroupFit fit = fit_group(values, n, u);
        params[(row * layout.groups() + g) * 2] = fit.scale;
        params[(row * layout.groups() + g) * 2 + 1] = fit.min;
        uint8_t* bytes = levels + row * layout.row_bytes() + g * (kInt4GroupSize / 2);
        for (int64_t j = 0; j < kInt4GroupSize / 2; ++j) bytes[j] = uint8_t(u[j] | (u[j + 32] << 4));
      }
    }
  });
  return out;
}

namespace {

// One group at a time, its two halves in loops of their own (low nibbles,
// then high), so that each inner loop has a fixed scale and offset and no
// branch, and vectorizes: prefill dequantizes every weight once per call.
template <class T>
void dequantize_row(const Int4Matrix& w, int64_t row, T* out) {
  constexpr int64_t kHalf = kInt4GroupSize / 2;
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * kInt4GroupSize;
    if (first >= w.cols) break;
    const float scale = f16_to_float(w.params[(row * w.groups() + g) * 2]);
    const float min = f16_to_float(w.params[(row * w.groups() + g) * 2 + 1]);
    const uint8_t* bytes = w.levels + row * w.row_bytes() + g * kHalf;
    if (first + kInt4GroupSize <= w.cols) {
      for (int64_t j = 0; j < kHalf; ++j) simd_portable::store(out, first + j, float(bytes[j] & 0x0f) * scale + min);
      for (int64_t j = 0; j < kHalf; ++j) simd_portable::store(out, first + kHalf + j, float(bytes[j] >> 4) * scale + min);
    } else {  // the last, partial group
      for (int64_t k = first; k < w.cols; ++k) {
        const int64_t j = k - first;
        const uint8_t level = j < kHalf ? bytes[j] & 0x0f : bytes[j - kHalf] >> 4;
        simd_portable::store(out, k, float(level) * scale + min);
      }
    }
  }
}

template <class T>
void dequantize_rows_as(const Int4Matrix& w, int64_t first_row, int64_t rows, T* out) {
  for_row_ranges(rows, w.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) dequantize_row(w, first_row + r, out + r * w.cols);
  });
}

}  // namespace

void dequantize_int4_rows(const Int4Matrix& w, int64_t first_row, int64_t rows, Storage s, void* out) {
  if (first_row < 0 || rows < 0 || first_row > w.rows || rows > w.rows - first_row)
    throw Error(fmt::format("cannot dequantize rows {}..{} of a {}x{} int4 matrix", first_row, first_row + rows,
                            w.rows, w.cols));
  if (s == Storage::F32)
    dequantize_rows_as(w, first_row, rows, static_cast<float*>(out));
  else
    dequantize_rows_as(w, first_row, rows, static_cast<uint16_t*>(out));
}

namespace {

// The portable kernel: one row at a time, a group's integer dot product in
// int32 (vectorized by the compiler), then the two float terms.
struct GenericInt4Kernel {
  static constexpr int rows_per_block(int) { return 1; }

  template <int N, int R>
  static void block(const Int4Job& job, int64_t row) {
    static_assert(R == 1);
    const uint8_t* w = job.w + row * job.row_bytes;
    const uint16_t* params = job.params + row * job.groups * 2;
    float total[N] = {};
    for (int64_t g = 0; g < job.groups; ++g) {
      const uint8_t* bytes = w + g * (kInt4GroupSize / 2);
      const float scale = f16_to_float(params[2 * g]), min = f16_to_float(params[2 * g + 1]);
      for (int n = 0; n < N; ++n) {
        const int8_t* x = job.x_q + n * job.padded_cols + g * kInt4GroupSize;
        int32_t dot = 0;
        for (int j = 0; j < kInt4GroupSize / 2; ++j)
          dot += int32_t(bytes[j] & 0x0f) * x[j] + int32_t(bytes[j] >> 4) * x[j + 32];
        const int64_t at = n * job.groups + g;
        total[n] += float(dot) * (scale * job.x_scales[at]) + min * job.x_sums[at];
      }
    }
    for (int n = 0; n < N; ++n) job.y[n * job.rows + row] = total[n];
  }
};

thread_local std::vector<int8_t> x_q_buffer, x_swizzled_buffer;
thread_local std::vector<float> x_scales_buffer, x_sums_buffer, x_scale_lanes_buffer, x_sum_lanes_buffer;

// Symmetric per-group int8 of x (zero past cols), and each group's x_scale · sum xq.
void quantize_x(const float* x, const Int4Matrix& w, int8_t* x_q, float* x_scales, float* x_sums) {
  std::fill(x_q, x_q + w.padded_cols, int8_t(0));
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * kInt4GroupSize, last = std::min(first + kInt4GroupSize, w.cols);
    float max_abs = 0.0f;
    for (int64_t k = first; k < last; ++k) max_abs = std::max(max_abs, std::fabs(x[k]));
    const float scale = max_abs / 127.0f;
    x_scales[g] = scale;
    x_sums[g] = 0.0f;
    if (scale == 0.0f) continue;
    int32_t sum = 0;
    for (int64_t k = first; k < last; ++k) {
      x_q[k] = int8_t(std::clamp(round_half_even(x[k] / scale), -127.0f, 127.0f));
      sum += x_q[k];
    }
    x_sums[g] = scale * float(sum);
  }
}

bool use_vnni(Isa isa) { return QVL_X86 && isa == Isa::Avx512 && cpu_features().avx512_vnni; }

Int4RowsKernel kernel_for(Isa isa) {
#if QVL_X86
  if (use_vnni(isa)) return int4_rows_avx512_vnni;
  if (isa == Isa::Avx512 || runs_avx2_code(isa)) return int4_rows_avx2;
#endif
  (void)isa;
  return int4_rows_generic;
}

}  // namespace

namespace detail {
void int4_rows_generic(const Int4Job& job, int64_t begin, int64_t end) {
  run_blocks<GenericInt4Kernel>(job, begin, end);
}
}  // namespace detail

void gemv_int4(const Int4Matrix& w, const float* x, float* y, int64_t batch, Isa isa) {
  if (batch < 1 || batch > kMaxVectors)
    throw Error(fmt::format("gemv_int4: batch {} is outside 1..{}", batch, kMaxVectors));
  validate_int4_layout(w, "gemv_int4");
  require_isa(isa, "gemv_int4");
  if (w.rows == 0) return;

  Int4Job job{};
  job.w = w.levels;
  job.params = w.params;
  job.rows = w.rows;
  job.padded_cols = w.padded_cols;
  job.row_bytes = w.row_bytes();
  job.groups = w.groups();
  job.batch = batch;
  job.y = y;
  x_q_buffer.resize(size_t(batch * w.padded_cols));
  x_scales_buffer.resize(size_t(batch * w.groups()));
  x_sums_buffer.resize(size_t(batch * w.groups()));
  for (int64_t n = 0; n < batch; ++n)
    quantize_x(x + n * w.cols, w, x_q_buffer.data() + n * w.padded_cols, x_scales_buffer.data() + n * w.groups(),
               x_sums_buffer.data() + n * w.groups());
  job.x_q = x_q_buffer.data();
  job.x_scales = x_scales_buffer.data();
  job.x_sums = x_sums_buffer.data();
  if (use_vnni(isa)) {
    const int64_t chunks = w.padded_cols / kInt4Chunk;
    x_swizzled_buffer.resize(x_q_buffer.size());
    x_scale_lanes_buffer.resize(size_t(batch * chunks * kLanes));
    x_sum_lanes_buffer.resize(size_t(batch * chunks * kLanes));
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t c = 0; c < chunks; ++c) {
        const int8_t* from = x_q_buffer.data() + n * w.padded_cols + c * kInt4Chunk;
        int8_t* to = x_swizzled_buffer.data() + n * w.padded_cols + c * kInt4Chunk;
        std::memcpy(to, from, 32);
        std::memcpy(to + 32, from + 64, 32);
        std::memcpy(to + 64, from + 32, 32);
        std::memcpy(to + 96, from + 96, 32);
        for (int half = 0; half < 2; ++half) {
          const int64_t g = n * w.groups() + 2 * c + half;
          for (int i = 0; i < kLanes / 2; ++i) {
            const size_t lane = size_t((n * chunks + c) * kLanes + half * (kLanes / 2) + i);
            x_scale_lanes_buffer[lane] = x_scales_buffer[size_t(g)];
            x_sum_lanes_buffer[lane] = x_sums_buffer[size_t(g)] * 0.125f;
          }
        }
      }
    job.x_swizzled = x_swizzled_buffer.data();
    job.x_scale_lanes = x_scale_lanes_buffer.data();
    job.x_sum_lanes = x_sum_lanes_buffer.data();
  }
  const Int4RowsKernel rows_kernel = kernel_for(isa);
  share_row_ranges(w.rows, job.row_bytes, [&](int64_t begin, int64_t end) {
    run_vector_groups(rows_kernel, job, begin, end, job.row_bytes);
  });
}

}  // namespace qvl::kernels
