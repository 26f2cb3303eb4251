// What the element-wise kernels (vision_ops.h, decode_ops.h) share: the two
// activation storages and the tier that does the arithmetic (kernels/cpu.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "qvl/kernels/cpu.h"   // Isa, active_isa
#include "qvl/kernels/gemv.h"  // bf16_to_float, float_to_bf16

namespace qvl::kernels {

enum class Storage { F32, BF16 };

}  // namespace qvl::kernels
