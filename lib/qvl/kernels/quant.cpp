// Int8 weights: quantizing, dequantizing, and the GEMV's dispatch, x
// preparation and portable kernel (the others are in quant_avx2.cpp and
// quant_avx512_vnni.cpp, each built with its tier's flags).
#include "qvl/kernels/quant.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"
#include "qvl/kernels/parallel.h"

namespace qvl::kernels {

using namespace detail;

void validate_int8_layout(const Int8Matrix& m, const std::string& what) {
  if (m.rows < 0 || m.cols < 0)
    throw Error(fmt::format("{}: negative shape {}x{}", what, m.rows, m.cols));
  if (m.group_size <= 0 || m.group_size % kInt8Chunk != 0)
    throw Error(fmt::format("{}: group size {} is not a positive multiple of {}", what, m.group_size, kInt8Chunk));
  if (m.rows > (int64_t(1) << 40) || m.padded_cols > (int64_t(1) << 40) ||
      (m.padded_cols > 0 && m.rows > (int64_t(1) << 40) / m.padded_cols))
    throw Error(fmt::format("{}: implausibly large shape {}x{}", what, m.rows, m.padded_cols));
  if (m.padded_cols < m.cols || m.padded_cols % m.group_size != 0 || m.padded_cols - m.cols >= m.group_size)
    throw Error(fmt::format("{}: padded width {} does not fit {} columns in groups of {}", what, m.padded_cols,
                            m.cols, m.group_size));
}

void QuantizedMatrix::FreeAligned::operator()(void* p) const { std::free(p); }

QuantizedMatrix::QuantizedMatrix(int64_t rows, int64_t cols, int64_t group_size) {
  if (group_size == kGroupPerRow) group_size = std::max<int64_t>(kInt8Chunk, round_up(cols, kInt8Chunk));
  view_.rows = rows;
  view_.cols = cols;
  view_.group_size = group_size;
  view_.padded_cols = group_size > 0 ? round_up(cols, group_size) : 0;
  validate_int8_layout(view_, fmt::format("int8 matrix {}x{}", rows, cols));
  const size_t weight_bytes = round_up(int64_t(view_.weight_bytes()), 64);
  const size_t total = round_up(int64_t(weight_bytes + view_.scale_bytes()), 64);
  storage_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(total, 64))));
  if (!storage_) throw Error(fmt::format("int8 matrix {}x{}: out of memory ({} bytes)", rows, cols, total));
  std::memset(storage_.get(), 0, total);
  view_.weights = reinterpret_cast<const int8_t*>(storage_.get());
  view_.scales = reinterpret_cast<const float*>(storage_.get() + weight_bytes);
}

QuantizedMatrix quantize_int8(const Bf16Matrix& w, int64_t group_size) {
  QuantizedMatrix out(w.rows, w.cols, group_size);
  const Int8Matrix& layout = out.view();
  int8_t* q = out.weights();
  float* scales = out.scales();
  for_row_ranges(w.rows, w.cols * 2, [&](int64_t begin, int64_t end) {
    std::vector<float> values(size_t(layout.group_size));
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t g = 0; g < layout.groups(); ++g) {
        const int64_t first = g * layout.group_size, last = std::min(first + layout.group_size, w.cols);
        float max_abs = 0.0f;
        for (int64_t k = first; k < last; ++k) {
          values[size_t(k - first)] = bf16_to_float(w.data[row * w.cols + k]);
          max_abs = std::max(max_abs, std::fabs(values[size_t(k - first)]));
        }
        const float scale = max_abs / 127.0f;
        scales[row * layout.groups() + g] = scale;
        if (scale == 0.0f) continue;  // storage is already zero
        for (int64_t k = first; k < last; ++k) {
          const float level = std::nearbyint(values[size_t(k - first)] / scale);
          q[row * layout.padded_cols + k] = int8_t(std::clamp(level, -127.0f, 127.0f));
        }
      }
    }
  });
  return out;
}

namespace {

// The portable kernel, written so the compiler vectorizes its inner loops
// (SSE2, NEON). The integer dot products are exact whatever their order, so
// it differs from the avx2/avx512 kernels only where the float accumulation
// multiplies and adds separately (targets without FMA).
struct GenericInt8Kernel {
  // One row at a time: its chunk is read once for all N vectors.
  static constexpr int rows_per_block(int) { return 1; }

  template <int N, int R>
  static void block(const Int8Job& job, int64_t row) {
    static_assert(R == 1);
    const int64_t groups = job.padded_cols / job.group_size;
    const int8_t* w = job.w + row * job.padded_cols;
    float lanes[N][kLanes] = {};
    for (int64_t g = 0; g < groups; ++g) {
      int32_t dot[N][kLanes] = {};
      const int64_t group_end = (g + 1) * job.group_size;
      for (int64_t k = g * job.group_size; k < group_end; k += kInt8Chunk) {
        const int8_t* chunk = w + k;
        for (int n = 0; n < N; ++n) {
          const int8_t* x = job.x_q + n * job.padded_cols + k;
          // Lane i sums bytes 4i..4i+3: a stride-4 pattern that aarch64
          // vectorizes with de-interleaving loads (measured faster than
          // summing per byte and folding, on x86 too).
          for (int i = 0; i < kLanes; ++i) {
            int32_t sum = 0;
            for (int j = 0; j < 4; ++j) sum += int16_t(x[4 * i + j]) * int16_t(chunk[4 * i + j]);
            dot[n][i] += sum;
          }
        }
      }
      const float w_scale = job.w_scales[row * groups + g];
      for (int n = 0; n < N; ++n) {
        const float scale = w_scale * job.x_scales[n * groups + g];
        for (int i = 0; i < kLanes; ++i) lanes[n][i] = float(dot[n][i]) * scale + lanes[n][i];
      }
    }
    for (int n = 0; n < N; ++n) job.y[n * job.rows + row] = reduce_pairwise(lanes[n]);
  }
};

thread_local std::vector<int8_t> x_q_buffer;
thread_local std::vector<uint8_t> x_biased_buffer;
thread_local std::vector<float> x_scales_buffer;

// v rounded to the nearest integer, ties to even, as std::nearbyint rounds in
// the default mode, for |v| < 2^22: adding 1.5 · 2^23 leaves no fraction bits.
// std::nearbyint is a libm call per element on baseline x86-64 (no SSE4.1),
// which cost a few percent of a whole GEMV here; this vectorizes.
inline float round_half_even(float v) {
  constexpr float kShifter = 12582912.0f;  // 1.5 · 2^23
  return (v + kShifter) - kShifter;
}

// Symmetric per-group int8 of x (zero past cols).
void quantize_x(const float* x, const Int8Matrix& w, int8_t* x_q, float* x_scales) {
  std::fill(x_q, x_q + w.padded_cols, int8_t(0));
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * w.group_size, last = std::min(first + w.group_size, w.cols);
    float max_abs = 0.0f;
    for (int64_t k = first; k < last; ++k) max_abs = std::max(max_abs, std::fabs(x[k]));
    const float scale = max_abs / 127.0f;
    x_scales[g] = scale;
    if (scale == 0.0f) continue;
    // x[k] / scale lies within ±127 give or take a rounding; the clamp takes
    // the rest (and a NaN or infinite x, whose group is lost anyway).
    for (int64_t k = first; k < last; ++k)
      x_q[k] = int8_t(std::clamp(round_half_even(x[k] / scale), -127.0f, 127.0f));
  }
}

bool use_vnni(Isa isa) { return QVL_X86 && isa == Isa::Avx512 && cpu_features().avx512_vnni; }

Int8RowsKernel kernel_for(Isa isa) {
#if QVL_X86
  if (use_vnni(isa)) return int8_rows_avx512_vnni;
  // AVX-512 without VNNI (Skylake-SP/X): AVX-512BW has no byte sign
  // instruction, so the avx2 kernel it is.
  if (isa == Isa::Avx512 || runs_avx2_code(isa)) return int8_rows_avx2;
#endif
  (void)isa;
  return int8_rows_generic;
}

}  // namespace

namespace detail {
void int8_rows_generic(const Int8Job& job, int64_t begin, int64_t end) {
  run_blocks<GenericInt8Kernel>(job, begin, end);
}
}  // namespace detail

void gemv_int8(const Int8Matrix& w, const float* x, float* y, int64_t batch, Isa isa) {
  if (batch < 1 || batch > kMaxVectors)
    throw Error(fmt::format("gemv_int8: batch {} is outside 1..{}", batch, kMaxVectors));
  validate_int8_layout(w, "gemv_int8");
  require_isa(isa, "gemv_int8");
  if (w.rows == 0) return;

  Int8Job job{};
  job.w = w.weights;
  job.w_scales = w.scales;
  job.rows = w.rows;
  job.padded_cols = w.padded_cols;
  job.group_size = w.group_size;
  job.batch = batch;
  job.y = y;
  const size_t x_bytes = size_t(batch * w.padded_cols);
  x_q_buffer.resize(x_bytes);
  x_scales_buffer.resize(size_t(batch * w.groups()));
  for (int64_t n = 0; n < batch; ++n)
    quantize_x(x + n * w.cols, w, x_q_buffer.data() + n * w.padded_cols, x_scales_buffer.data() + n * w.groups());
  job.x_q = x_q_buffer.data();
  job.x_scales = x_scales_buffer.data();
  if (use_vnni(isa)) {
    // xq + 128 wraps to the byte xq ^ 0x80.
    x_biased_buffer.resize(x_bytes);
    for (size_t i = 0; i < x_bytes; ++i) x_biased_buffer[i] = uint8_t(x_q_buffer[i]) ^ 0x80u;
    job.x_biased = x_biased_buffer.data();
  }
  const Int8RowsKernel rows_kernel = kernel_for(isa);
  share_row_ranges(w.rows, w.padded_cols, [&](int64_t begin, int64_t end) {
    run_vector_groups(rows_kernel, job, begin, end, w.padded_cols);
  });
}

}  // namespace qvl::kernels
