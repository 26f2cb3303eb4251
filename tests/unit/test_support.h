// Paths and loaders for the reference fixtures copied into tests/data.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "qvl/io/mapped_file.h"

namespace qvl::test {

inline std::string data_path(const std::string& rel) { return std::string(QVL_TEST_DATA) + "/" + rel; }
inline std::string tiny_model_dir() { return data_path("tiny-qwen3-vl"); }

inline const nlohmann::json& goldens() {
  static const nlohmann::json j = nlohmann::json::parse(read_text_file(data_path("goldens.json")));
  return j;
}

}  // namespace qvl::test
