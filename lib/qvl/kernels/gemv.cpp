// bf16 GEMV: picks a code path, lays x out for it and splits rows across
// threads. The portable kernel lives here too; the AVX-512 ones are in
// gemv_avx512.cpp, the only file built with AVX-512 flags.
#include "qvl/kernels/gemv.h"

#include <ATen/Parallel.h>
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/detail.h"

namespace qvl::kernels {

using namespace detail;

float bf16_to_float(uint16_t bits) {
  const uint32_t widened = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if (std::isnan(value)) return uint16_t((bits >> 16) | 0x40);  // keep it a NaN after truncation
  const uint32_t round_to_even = 0x7fff + ((bits >> 16) & 1);
  return uint16_t((bits + round_to_even) >> 16);
}

bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
bool cpu_has_avx512_bf16() { return cpu_has_avx512() && __builtin_cpu_supports("avx512bf16"); }
bool cpu_has_avx512_vnni() { return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni"); }

bool path_supported(Bf16Path path) {
  switch (path) {
    case Bf16Path::Best:
    case Bf16Path::Scalar: return true;
    case Bf16Path::Avx512Fma: return cpu_has_avx512();
    case Bf16Path::Avx512DotBf16: return cpu_has_avx512_bf16();
  }
  return false;
}

const char* path_name(Bf16Path path) {
  switch (path) {
    case Bf16Path::Best: return "best";
    case Bf16Path::Scalar: return "scalar";
    case Bf16Path::Avx512Fma: return "avx512-fma";
    case Bf16Path::Avx512DotBf16: return "avx512-dpbf16";
  }
  return "?";
}

namespace detail {

void for_row_ranges(int64_t rows, int64_t bytes_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  // Waking a second thread costs a few microseconds: not worth it below ~64 KiB.
  const int64_t min_rows = std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(1, bytes_per_row));
  const int64_t max_pieces = (rows + min_rows - 1) / min_rows;
  if (max_pieces <= 1 || at::get_num_threads() <= 1 || omp_in_parallel()) return fn(0, rows);
  std::exception_ptr error;
  // Our own OpenMP region, not at::parallel_for: that is an inline template,
  // serial in any file built without -fopenmp (all of ours but this one).
  // Same libgomp, so the same worker threads as ATen's; and like ATen no
  // num_threads clause (GOMP re-creates its team when it changes).
#pragma omp parallel
  {
    const int64_t pieces = std::min<int64_t>(omp_get_num_threads(), max_pieces);
    const int64_t rows_per_piece = round_up((rows + pieces - 1) / pieces, kRowAlignment);
    const int64_t begin = omp_get_thread_num() * rows_per_piece;
    const int64_t end = std::min(rows, begin + rows_per_piece);
    if (begin < end) {
      try {
        fn(begin, end);
      } catch (...) {
#pragma omp critical(qvl_for_row_ranges)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

void bf16_fma_rows_scalar(const Bf16Job& job, int64_t row_begin, int64_t row_end) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const uint16_t* w = job.w + row * job.cols;
    for (int64_t n = 0; n < job.batch; ++n) {
      const float* x = job.x_split + n * job.padded_cols;
      float lanes[kLanes] = {};
      for (int64_t chunk = 0; chunk < job.padded_cols; chunk += kBf16Chunk) {
        for (int i = 0; i < kLanes; ++i) {
          const int64_t k = chunk + 2 * i;
          const float w_even = k < job.cols ? bf16_to_float(w[k]) : 0.0f;
          const float w_odd = k + 1 < job.cols ? bf16_to_float(w[k + 1]) : 0.0f;
          lanes[i] = std::fma(w_even, x[chunk + i], lanes[i]);
          lanes[i] = std::fma(w_odd, x[chunk + kLanes + i], lanes[i]);
        }
      }
      job.y[n * job.rows + row] = reduce_lanes(lanes);
    }
  }
}

}  // namespace detail

namespace {

// Per calling thread, so concurrent GEMVs from different threads do not share.
thread_local std::vector<float> x_split_buffer;
thread_local std::vector<uint16_t> x_bf16_buffer;

void split_even_odd(const float* x, int64_t cols, int64_t padded_cols, float* out) {
  std::fill(out, out + padded_cols, 0.0f);
  for (int64_t k = 0; k < cols; ++k) {
    const int64_t chunk = k / kBf16Chunk * kBf16Chunk, within = k - chunk;
    out[chunk + (within & 1) * kLanes + within / 2] = x[k];
  }
}

}  // namespace

void gemv_bf16(const Bf16Matrix& w, const float* x, float* y, int64_t batch, Bf16Path path) {
  if (batch < 1 || batch > kMaxBatch)
    throw Error(fmt::format("gemv_bf16: batch {} is outside 1..{}", batch, kMaxBatch));
  if (w.rows < 0 || w.cols < 0 || (w.data == nullptr && w.rows * w.cols > 0))
    throw Error(fmt::format("gemv_bf16: bad matrix {}x{}", w.rows, w.cols));
  if (path == Bf16Path::Best) path = cpu_has_avx512() ? Bf16Path::Avx512Fma : Bf16Path::Scalar;
  if (!path_supported(path))
    throw Error(fmt::format("gemv_bf16: this CPU cannot run the {} path", path_name(path)));
  if (w.rows == 0) return;

  Bf16Job job{};
  job.w = w.data;
  job.rows = w.rows;
  job.cols = w.cols;
  job.padded_cols = round_up(w.cols, kBf16Chunk);
  job.batch = batch;
  job.y = y;
  void (*rows_kernel)(const Bf16Job&, int64_t, int64_t) = nullptr;
  if (path == Bf16Path::Avx512DotBf16) {
    x_bf16_buffer.assign(size_t(batch * job.padded_cols), 0);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t k = 0; k < w.cols; ++k)
        x_bf16_buffer[size_t(n * job.padded_cols + k)] = float_to_bf16(x[n * w.cols + k]);
    job.x_bf16 = x_bf16_buffer.data();
    rows_kernel = bf16_dot_rows_avx512;
  } else {
    x_split_buffer.resize(size_t(batch * job.padded_cols));
    for (int64_t n = 0; n < batch; ++n)
      split_even_odd(x + n * w.cols, w.cols, job.padded_cols, x_split_buffer.data() + n * job.padded_cols);
    job.x_split = x_split_buffer.data();
    rows_kernel = path == Bf16Path::Avx512Fma ? bf16_fma_rows_avx512 : bf16_fma_rows_scalar;
  }
  for_row_ranges(w.rows, w.cols * 2, [&](int64_t begin, int64_t end) { rows_kernel(job, begin, end); });
}

}  // namespace qvl::kernels
