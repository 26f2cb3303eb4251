// What the torch-free kernel tests share: random data, the CPU tiers, thread
// counts and float64 references computed here, independent of the kernels.
#pragma once
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "qvl/kernels/cpu.h"
#include "qvl/kernels/gemv.h"

namespace qvl::test {

inline const std::vector<kernels::Isa> kAllTiers = {kernels::Isa::Generic, kernels::Isa::Neon, kernels::Isa::Avx2,
                                                    kernels::Isa::Avx2Vnni, kernels::Isa::Avx512};

// Every tier this CPU can run, whatever QVL_ISA says.
inline std::vector<kernels::Isa> supported_tiers() {
  std::vector<kernels::Isa> tiers;
  for (kernels::Isa isa : kAllTiers)
    if (kernels::isa_supported(isa)) tiers.push_back(isa);
  return tiers;
}

// The x86 SIMD tiers promise each other's bits; the portable code (generic,
// neon) only its error bound, as it may multiply and add separately.
inline bool is_simd_x86(kernels::Isa isa) { return kernels::runs_avx2_code(isa) || isa == kernels::Isa::Avx512; }

// n values ~ N(mean, spread²) from `seed`.
inline std::vector<float> normal_values(int64_t n, uint64_t seed, float spread = 1.0f, float mean = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(mean, spread);
  std::vector<float> v(size_t(n > 0 ? n : 0));
  for (float& x : v) x = normal(rng);
  return v;
}

// The values rounded to bf16 (bits).
inline std::vector<uint16_t> to_bf16(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = kernels::float_to_bf16(values[i]);
  return bits;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  // (memcmp of empty vectors would be handed null pointers: undefined.)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Sets the OpenMP team size (what at::set_num_threads sets) for a scope.
struct ThreadCount {
  explicit ThreadCount(int n) : saved(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved); }
  int saved;
};

// For a GEMM of `rows` rows of `in` floats into rows of `out` floats, called
// as gemm(x, x_stride, y, y_stride) (float32 in and out), whose result for
// the dense x is y: rows further apart than their width, in and out, give
// the same outputs and leave the gaps untouched; one thread or two give y's
// bits (each output is computed whole by one thread).
template <class Gemm>
void check_strides_and_threads(int64_t rows, int64_t in, int64_t out, const std::vector<float>& x,
                               const std::vector<float>& y, Gemm gemm) {
  const int64_t x_stride = in + 5, y_stride = out + 3;
  std::vector<float> x_wide(size_t(rows * x_stride), 1e30f), y_wide(size_t(rows * y_stride), 42.0f);
  for (int64_t m = 0; m < rows; ++m)
    std::copy(x.begin() + m * in, x.begin() + (m + 1) * in, x_wide.begin() + m * x_stride);
  gemm(x_wide.data(), x_stride, y_wide.data(), y_stride);
  bool same = true, gaps = true;
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t n = 0; n < out; ++n) same &= y_wide[size_t(m * y_stride + n)] == y[size_t(m * out + n)];
    for (int64_t n = out; n < y_stride; ++n) gaps &= y_wide[size_t(m * y_stride + n)] == 42.0f;
  }
  CHECK(same);
  CHECK(gaps);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ThreadCount t(threads);
    std::vector<float> again(y.size(), -1.0f);
    gemm(x.data(), in, again.data(), out);
    CHECK(std::memcmp(again.data(), y.data(), y.size() * sizeof(float)) == 0);
  }
}

}  // namespace qvl::test
