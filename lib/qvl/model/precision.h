// How a session computes: the compute dtype of weights, KV cache and
// activations, and whether the decoder's projections are quantized. Spelled
// as on the command line ("bf16", "int8", "int4"); the apps parse a flag once, with
// these functions, and everything below them passes the enums.
#pragma once
#include <cstdint>
#include <string_view>

namespace qvl {

enum class ComputeDtype {
  BF16,  // fast: the checkpoint's own dtype, used in place
  F32,   // matches the reference to float32 rounding; converted copies of the weights
};

enum class WeightQuant {
  None,  // projections use the checkpoint's weights (in place when dtypes agree)
  Int8,  // projections use int8 weights with one scale per group, cached on disk
  Int4,  // projections use 4-bit weights, a scale and an offset per 64 (kernels/quant4.h), cached on disk
};

// Int8 weights sharing one scale. 128 keeps a 2048-wide GEMV within ~1% of
// bf16 (see the kernel tests' error table) at 3% extra bytes for the scales.
constexpr int64_t kDefaultInt8GroupSize = 128;

ComputeDtype parse_compute_dtype(std::string_view name);  // "bf16" | "f32"; throws qvl::Error
const char* name_of(ComputeDtype dtype);
int64_t bytes_per_value(ComputeDtype dtype);               // 2 | 4

WeightQuant parse_weight_quant(std::string_view name);    // "none" | "int8" | "int4"; throws qvl::Error
const char* name_of(WeightQuant quant);

}  // namespace qvl
