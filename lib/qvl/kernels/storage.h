// What the element-wise kernels (vision_ops.h, decode_ops.h) share: the two
// activation storages, the tier that does the arithmetic (kernels/cpu.h), and
// scalar access to one element for the portable code.
#pragma once
#include <cstddef>
#include <cstdint>

#include "qvl/kernels/cpu.h"   // Isa, active_isa
#include "qvl/kernels/gemv.h"  // bf16_to_float, float_to_bf16

namespace qvl::kernels {

enum class Storage { F32, BF16 };

// `static`: an AVX-512 file including this must never provide the copy
// other files link to.
static inline float load_at(Storage s, const void* p, int64_t i) {
  return s == Storage::F32 ? static_cast<const float*>(p)[i] : bf16_to_float(static_cast<const uint16_t*>(p)[i]);
}
static inline void store_at(Storage s, void* p, int64_t i, float v) {
  if (s == Storage::F32)
    static_cast<float*>(p)[i] = v;
  else
    static_cast<uint16_t*>(p)[i] = float_to_bf16(v);
}
// v as the storage would hold it.
static inline float round_to(Storage s, float v) { return s == Storage::F32 ? v : bf16_to_float(float_to_bf16(v)); }
static inline size_t element_size(Storage s) { return s == Storage::F32 ? 4 : 2; }

}  // namespace qvl::kernels
