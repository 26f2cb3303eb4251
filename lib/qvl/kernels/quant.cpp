// Int8 weights: quantizing, dequantizing, and the GEMV's dispatch, x
// preparation and portable kernels (the AVX-512 ones are in quant_avx512.cpp).
#include "qvl/kernels/quant.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"

namespace qvl::kernels {

using namespace detail;

void validate_int8_layout(const Int8Matrix& m, const std::string& what) {
  if (m.rows < 0 || m.cols < 0)
    throw Error(fmt::format("{}: negative shape {}x{}", what, m.rows, m.cols));
  if (m.group_size <= 0 || m.group_size % kInt8Chunk != 0)
    throw Error(fmt::format("{}: group size {} is not a positive multiple of {}", what, m.group_size, kInt8Chunk));
  if (m.padded_cols > (int64_t(1) << 40) || (m.padded_cols > 0 && m.rows > (int64_t(1) << 40) / m.padded_cols))
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

void dequantize_int8(const Int8Matrix& w, float* out) {
  for (int64_t row = 0; row < w.rows; ++row)
    for (int64_t k = 0; k < w.cols; ++k)
      out[row * w.cols + k] =
          float(w.weights[row * w.padded_cols + k]) * w.scales[row * w.groups() + k / w.group_size];
}

bool path_supported(Int8Path path) {
  switch (path) {
    case Int8Path::Best:
    case Int8Path::FloatXScalar:
    case Int8Path::Int8XScalar: return true;
    case Int8Path::FloatXAvx512: return cpu_has_avx512();
    case Int8Path::Int8XVnni: return cpu_has_avx512_vnni();
  }
  return false;
}

const char* path_name(Int8Path path) {
  switch (path) {
    case Int8Path::Best: return "best";
    case Int8Path::FloatXScalar: return "float-x-scalar";
    case Int8Path::FloatXAvx512: return "float-x-avx512";
    case Int8Path::Int8XScalar: return "int8-x-scalar";
    case Int8Path::Int8XVnni: return "int8-x-vnni";
  }
  return "?";
}

namespace detail {

void int8_float_rows_scalar(const Int8Job& job, int64_t row_begin, int64_t row_end) {
  const int64_t groups = job.padded_cols / job.group_size;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int8_t* w = job.w + row * job.padded_cols;
    for (int64_t n = 0; n < job.batch; ++n) {
      const float* x = job.x + n * job.padded_cols;
      float lanes[kLanes] = {};
      for (int64_t k = 0; k < job.padded_cols; k += kLanes) {
        const float scale = job.w_scales[row * groups + k / job.group_size];
        for (int i = 0; i < kLanes; ++i) lanes[i] = std::fma(float(w[k + i]) * scale, x[k + i], lanes[i]);
      }
      job.y[n * job.rows + row] = reduce_lanes(lanes);
    }
  }
}

void int8_vnni_rows_scalar(const Int8Job& job, int64_t row_begin, int64_t row_end) {
  const int64_t groups = job.padded_cols / job.group_size;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int8_t* w = job.w + row * job.padded_cols;
    for (int64_t n = 0; n < job.batch; ++n) {
      const uint8_t* x_biased = job.x_biased + n * job.padded_cols;
      float lanes[kLanes] = {};
      for (int64_t g = 0; g < groups; ++g) {
        // As vpdpbusd sums: lane i of a 64-byte chunk gets elements 4i..4i+3.
        int32_t dot[kLanes] = {};
        for (int64_t k = g * job.group_size; k < (g + 1) * job.group_size; ++k)
          dot[k % kInt8Chunk / 4] += (int32_t(x_biased[k]) - 128) * int32_t(w[k]);
        const float scale = job.w_scales[row * groups + g] * job.x_scales[n * groups + g];
        for (int i = 0; i < kLanes; ++i) lanes[i] = std::fma(float(dot[i]), scale, lanes[i]);
      }
      job.y[n * job.rows + row] = reduce_lanes(lanes);
    }
  }
}

}  // namespace detail

namespace {

thread_local std::vector<float> x_padded_buffer;
thread_local std::vector<uint8_t> x_biased_buffer;
thread_local std::vector<float> x_scales_buffer;

// Symmetric per-group int8 of x, stored biased by 128 (see Int8Job).
void quantize_x(const float* x, const Int8Matrix& w, uint8_t* x_biased, float* x_scales) {
  std::fill(x_biased, x_biased + w.padded_cols, uint8_t(128));
  for (int64_t g = 0; g < w.groups(); ++g) {
    const int64_t first = g * w.group_size, last = std::min(first + w.group_size, w.cols);
    float max_abs = 0.0f;
    for (int64_t k = first; k < last; ++k) max_abs = std::max(max_abs, std::fabs(x[k]));
    const float scale = max_abs / 127.0f;
    x_scales[g] = scale;
    if (scale == 0.0f) continue;
    for (int64_t k = first; k < last; ++k)
      x_biased[k] = uint8_t(int(std::clamp(std::nearbyint(x[k] / scale), -127.0f, 127.0f)) + 128);
  }
}

}  // namespace

void gemv_int8(const Int8Matrix& w, const float* x, float* y, int64_t batch, Int8Path path) {
  if (batch < 1 || batch > kMaxBatch)
    throw Error(fmt::format("gemv_int8: batch {} is outside 1..{}", batch, kMaxBatch));
  validate_int8_layout(w, "gemv_int8");
  if (path == Int8Path::Best) path = cpu_has_avx512_vnni() ? Int8Path::Int8XVnni : Int8Path::Int8XScalar;
  if (!path_supported(path))
    throw Error(fmt::format("gemv_int8: this CPU cannot run the {} path", path_name(path)));
  if (w.rows == 0) return;

  Int8Job job{};
  job.w = w.weights;
  job.w_scales = w.scales;
  job.rows = w.rows;
  job.padded_cols = w.padded_cols;
  job.group_size = w.group_size;
  job.batch = batch;
  job.y = y;
  void (*rows_kernel)(const Int8Job&, int64_t, int64_t) = nullptr;
  if (path == Int8Path::FloatXScalar || path == Int8Path::FloatXAvx512) {
    x_padded_buffer.assign(size_t(batch * w.padded_cols), 0.0f);
    for (int64_t n = 0; n < batch; ++n)
      std::copy(x + n * w.cols, x + (n + 1) * w.cols, x_padded_buffer.begin() + n * w.padded_cols);
    job.x = x_padded_buffer.data();
    rows_kernel = path == Int8Path::FloatXAvx512 ? int8_float_rows_avx512 : int8_float_rows_scalar;
  } else {
    x_biased_buffer.resize(size_t(batch * w.padded_cols));
    x_scales_buffer.resize(size_t(batch * w.groups()));
    for (int64_t n = 0; n < batch; ++n)
      quantize_x(x + n * w.cols, w, x_biased_buffer.data() + n * w.padded_cols, x_scales_buffer.data() + n * w.groups());
    job.x_biased = x_biased_buffer.data();
    job.x_scales = x_scales_buffer.data();
    rows_kernel = path == Int8Path::Int8XVnni ? int8_vnni_rows_avx512 : int8_vnni_rows_scalar;
  }
  for_row_ranges(w.rows, w.padded_cols, [&](int64_t begin, int64_t end) { rows_kernel(job, begin, end); });
}

}  // namespace qvl::kernels
