#include "qvl/model/precision.h"

#include <string>

#include "qvl/error.h"

namespace qvl {

ComputeDtype parse_compute_dtype(std::string_view name) {
  if (name == "bf16") return ComputeDtype::BF16;
  if (name == "f32") return ComputeDtype::F32;
  throw Error("unknown dtype '" + std::string(name) + "' (use bf16 or f32)");
}

const char* name_of(ComputeDtype dtype) { return dtype == ComputeDtype::F32 ? "f32" : "bf16"; }

int64_t bytes_per_value(ComputeDtype dtype) { return dtype == ComputeDtype::F32 ? 4 : 2; }

WeightQuant parse_weight_quant(std::string_view name) {
  if (name == "none") return WeightQuant::None;
  if (name == "int8") return WeightQuant::Int8;
  if (name == "int4") return WeightQuant::Int4;
  throw Error("unknown weight quantization '" + std::string(name) + "' (use none, int8 or int4)");
}

const char* name_of(WeightQuant quant) {
  switch (quant) {
    case WeightQuant::Int8: return "int8";
    case WeightQuant::Int4: return "int4";
    case WeightQuant::None: break;
  }
  return "none";
}

}  // namespace qvl
