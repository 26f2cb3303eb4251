// For test files that use ATen: include this instead of <doctest/doctest.h>.
// ATen brings glog, whose CHECK macros would silently replace doctest's (and
// abort instead of reporting), so they are dropped before doctest defines its
// own. Also the golden tensors and the tiny checkpoint, shared by the suites.
#pragma once
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "qvl/decoder/torch_view.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"
#include "test_support.h"

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>

namespace qvl::test {

// The golden model cases and the ids that end a greedy generation.
inline const std::vector<std::string> kCases = {"text_only", "one_image", "system_image", "multi_turn"};
inline const std::vector<int64_t> kStopIds = {151645, 151643};

inline const SafetensorsFile& goldens_file() {
  static SafetensorsFile f(data_path("goldens_model.safetensors"));
  return f;
}
inline bool has_golden(const std::string& name) { return goldens_file().find(name) != nullptr; }
// A read-only view of a golden tensor: copy before writing.
inline at::Tensor golden(const std::string& name) { return tensor_view(goldens_file().get(name)); }

inline const Checkpoint& tiny_checkpoint() {
  static Checkpoint c(tiny_model_dir());
  return c;
}
inline const TextConfig& tiny_config() {
  static TextConfig c = load_model_config(tiny_model_dir()).text;
  return c;
}

}  // namespace qvl::test
