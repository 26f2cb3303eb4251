#include <doctest/doctest.h>

#include "qvl/error.h"
#include "qvl/model/precision.h"

using namespace qvl;

TEST_CASE("precision: flag spellings parse to the enums and back; others are one-line errors") {
  CHECK(parse_compute_dtype("bf16") == ComputeDtype::BF16);
  CHECK(parse_compute_dtype("f32") == ComputeDtype::F32);
  CHECK(std::string(name_of(ComputeDtype::F32)) == "f32");
  CHECK(std::string(name_of(ComputeDtype::BF16)) == "bf16");
  CHECK(bytes_per_value(ComputeDtype::BF16) == 2);
  CHECK(bytes_per_value(ComputeDtype::F32) == 4);
  CHECK(parse_weight_quant("none") == WeightQuant::None);
  CHECK(parse_weight_quant("int8") == WeightQuant::Int8);
  CHECK(std::string(name_of(WeightQuant::Int8)) == "int8");
  CHECK(parse_weight_quant("int4") == WeightQuant::Int4);
  CHECK(std::string(name_of(WeightQuant::Int4)) == "int4");
  CHECK(std::string(name_of(WeightQuant::None)) == "none");
  CHECK_THROWS_WITH_AS(parse_compute_dtype("fp16"), "unknown dtype 'fp16' (use bf16 or f32)", Error);
  CHECK_THROWS_WITH_AS(parse_weight_quant("int3"), "unknown weight quantization 'int3' (use none, int8 or int4)", Error);
}
