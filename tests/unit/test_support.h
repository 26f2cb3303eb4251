// Paths and loaders for the reference fixtures copied into tests/data.
#pragma once
#include <nlohmann/json.hpp>
#include <cstdlib>
#include <string>

#include "qvl/io/mapped_file.h"

namespace qvl::test {

inline std::string data_path(const std::string& rel) { return std::string(QVL_TEST_DATA) + "/" + rel; }
inline std::string tiny_model_dir() { return data_path("tiny-qwen3-vl"); }

// Wall-time bounds are multiplied by QVL_TEST_TIME_SCALE (sanitizers and
// emulators run the same work several times slower).
inline double time_scale() {
  const char* v = std::getenv("QVL_TEST_TIME_SCALE");
  const double scale = v ? std::atof(v) : 1.0;
  return scale >= 1.0 ? scale : 1.0;
}

// QEMU's user mode (scripts/cross_arm64.sh sets QVL_TEST_UNDER_QEMU) accepts
// madvise's MADV_POPULATE_READ and MADV_HUGEPAGE without doing what a kernel
// does, so the checks of their effect cannot run there.
inline bool under_qemu_user_mode() { return std::getenv("QVL_TEST_UNDER_QEMU") != nullptr; }

inline const nlohmann::json& goldens() {
  static const nlohmann::json j = nlohmann::json::parse(read_text_file(data_path("goldens.json")));
  return j;
}

}  // namespace qvl::test
