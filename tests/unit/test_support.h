// Paths and loaders for the reference fixtures copied into tests/data.
#pragma once
#include <nlohmann/json.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

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

// A little-endian TIFF of `pages` 2x2 gray directories sharing one strip, the last one
// pointing back at the first when `loop`.
inline std::vector<uint8_t> many_page_tiff(int pages, bool loop) {
  std::vector<uint8_t> out = {'I', 'I', 42, 0, 12, 0, 0, 0, 1, 2, 3, 4};
  auto u16 = [&](uint32_t v) { out.insert(out.end(), {uint8_t(v), uint8_t(v >> 8)}); };
  auto u32 = [&](uint32_t v) { u16(v & 0xFFFF); u16(v >> 16); };
  const uint32_t ifd_size = 2 + 8 * 12 + 4;
  for (int p = 0; p < pages; ++p) {
    const uint16_t entries[8][3] = {{256, 3, 2}, {257, 3, 2}, {258, 3, 8}, {259, 3, 1},
                                    {262, 3, 1}, {273, 4, 8}, {278, 3, 2}, {279, 4, 4}};
    u16(8);
    for (const auto& e : entries) {
      u16(e[0]);
      u16(e[1]);
      u32(1);
      if (e[1] == 3) { u16(e[2]); u16(0); } else { u32(e[2]); }
    }
    const bool last = p == pages - 1;
    u32(last ? (loop ? 12 : 0) : uint32_t(12 + (p + 1) * ifd_size));
  }
  return out;
}

}  // namespace qvl::test
