#include "qvl/image/resize.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>

#include "qvl/error.h"

namespace qvl {
namespace {

// Keys' cubic convolution kernel with a = -0.5, as PyTorch uses for antialiasing.
double cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The largest shift that keeps the biggest weight, times two, inside int16:
// PyTorch picks it per axis so that every weight has as many bits as it can.
int fixed_point_precision(double max_weight) {
  int precision = 0;
  for (; precision < 22; ++precision) {
    const int next = int(0.5 + max_weight * double(1 << (precision + 1)));
    if (next >= (1 << 15)) break;
  }
  return precision;
}

int16_t to_fixed(double w, int precision) {
  const double v = w * double(1 << precision);
  return int16_t(v < 0 ? int(v - 0.5) : int(v + 0.5));  // half away from zero
}

uint8_t finish(int32_t acc, int precision) { return uint8_t(std::clamp(acc >> precision, 0, 255)); }

// One pass along x: `rows` rows of `in_w` pixels become rows of `out_w` pixels.
void resample_rows(const uint8_t* in, int64_t in_w, int64_t rows, uint8_t* out, int64_t out_w,
                   const ResampleWeights& f) {
  const int32_t half = 1 << (f.precision - 1);
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in + y * in_w * 3;
    uint8_t* dst = out + y * out_w * 3;
    for (int64_t x = 0; x < out_w; ++x) {
      const int16_t* w = &f.weights[size_t(x * f.taps)];
      const uint8_t* p = src + f.first[size_t(x)] * 3;
      int32_t r = half, g = half, b = half;
      for (int64_t k = 0; k < f.count[size_t(x)]; ++k, p += 3) {
        r += w[k] * p[0];
        g += w[k] * p[1];
        b += w[k] * p[2];
      }
      dst[x * 3 + 0] = finish(r, f.precision);
      dst[x * 3 + 1] = finish(g, f.precision);
      dst[x * 3 + 2] = finish(b, f.precision);
    }
  }
}

// One pass along y over rows of `row_bytes` interleaved samples.
void resample_columns(const uint8_t* in, int64_t row_bytes, uint8_t* out, int64_t out_h, const ResampleWeights& f) {
  const int32_t half = 1 << (f.precision - 1);
  std::vector<int32_t> acc(static_cast<size_t>(row_bytes));
  for (int64_t y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), half);
    const int16_t* w = &f.weights[size_t(y * f.taps)];
    for (int64_t k = 0; k < f.count[size_t(y)]; ++k) {
      const uint8_t* src = in + (f.first[size_t(y)] + k) * row_bytes;
      for (int64_t i = 0; i < row_bytes; ++i) acc[size_t(i)] += w[k] * src[i];
    }
    uint8_t* dst = out + y * row_bytes;
    for (int64_t i = 0; i < row_bytes; ++i) dst[i] = finish(acc[size_t(i)], f.precision);
  }
}

}  // namespace

ResampleWeights bicubic_antialias_weights(int64_t in_size, int64_t out_size) {
  const double scale = double(in_size) / double(out_size);
  // Downscaling widens the kernel by the scale (that is the antialiasing).
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  const double inv_scale = scale >= 1.0 ? 1.0 / scale : 1.0;

  ResampleWeights f;
  f.taps = int64_t(std::ceil(support)) * 2 + 1;
  f.first.resize(size_t(out_size));
  f.count.resize(size_t(out_size));
  std::vector<double> real(size_t(out_size * f.taps), 0.0);
  double max_weight = 0.0;
  for (int64_t i = 0; i < out_size; ++i) {
    const double center = scale * (double(i) + 0.5);
    const int64_t lo = std::max<int64_t>(int64_t(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(int64_t(center + support + 0.5), in_size);
    const int64_t n = std::min(hi - lo, f.taps);
    double* w = &real[size_t(i * f.taps)];
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      w[j] = cubic((double(j + lo) - center + 0.5) * inv_scale);
      total += w[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < n; ++j) {
        w[j] /= total;
        max_weight = std::max(max_weight, w[j]);
      }
    }
    f.first[size_t(i)] = lo;
    f.count[size_t(i)] = std::max<int64_t>(n, 0);
  }
  f.precision = fixed_point_precision(max_weight);
  f.weights.resize(real.size());
  for (size_t k = 0; k < real.size(); ++k) f.weights[k] = to_fixed(real[k], f.precision);
  return f;
}

RgbImage resize_bicubic_antialias(const RgbImage& in, int64_t out_width, int64_t out_height) {
  if (in.width <= 0 || in.height <= 0 || in.pixels.size() != size_t(in.width * in.height * 3))
    throw Error(fmt::format("resize: input image {}x{} has {} bytes of pixels", in.width, in.height, in.pixels.size()));
  if (out_width <= 0 || out_height <= 0)
    throw Error(fmt::format("resize: invalid output size {}x{}", out_width, out_height));

  // Width first, then height, each pass rounding to uint8 and skipped when its size does not change.
  RgbImage wide;
  const RgbImage* stage = &in;
  if (out_width != in.width) {
    wide.width = out_width;
    wide.height = in.height;
    wide.pixels.resize(size_t(out_width * in.height * 3));
    resample_rows(in.pixels.data(), in.width, in.height, wide.pixels.data(), out_width,
                  bicubic_antialias_weights(in.width, out_width));
    stage = &wide;
  }
  if (out_height == stage->height) {
    if (stage == &in) return in;
    return wide;
  }
  RgbImage out;
  out.width = out_width;
  out.height = out_height;
  out.pixels.resize(size_t(out_width * out_height * 3));
  resample_columns(stage->pixels.data(), out_width * 3, out.pixels.data(), out_height,
                   bicubic_antialias_weights(stage->height, out_height));
  return out;
}

}  // namespace qvl
