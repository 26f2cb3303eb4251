// What the torch-free kernel tests share: random data, the CPU tiers, thread
// counts and float64 references computed here, independent of the kernels.
#pragma once
#include <omp.h>

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

}  // namespace qvl::test
