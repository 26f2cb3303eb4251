// Memory in huge-page-advised mappings (io/huge_pages.h): aligned where it is
// mapped, every byte usable, freed without disturbing its neighbours.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "qvl/io/huge_pages.h"

using namespace qvl;

TEST_CASE("allocate_huge_paged: 2 MB aligned from 2 MB on, every byte writable, neighbours untouched") {
  const size_t sizes[] = {0, 1, 4096, kHugePageBytes - 1, kHugePageBytes, kHugePageBytes + 1, 5 * kHugePageBytes + 123};
  std::vector<std::pair<uint8_t*, size_t>> blocks;
  for (size_t bytes : sizes) {
    CAPTURE(bytes);
    auto* p = static_cast<uint8_t*>(allocate_huge_paged(bytes));
    REQUIRE(p != nullptr);
    if (bytes >= kHugePageBytes) CHECK(reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0);
    std::memset(p, int(bytes % 251), bytes);
    blocks.emplace_back(p, bytes);
  }
  // Freed in another order than allocated: what is left still holds its bytes.
  for (size_t i = 0; i < blocks.size(); i += 2) free_huge_paged(blocks[i].first, blocks[i].second);
  for (size_t i = 1; i < blocks.size(); i += 2) {
    const auto [p, bytes] = blocks[i];
    CAPTURE(bytes);
    size_t wrong = 0;
    for (size_t j = 0; j < bytes; ++j) wrong += p[j] != uint8_t(bytes % 251);
    CHECK(wrong == 0);
    free_huge_paged(p, bytes);
  }
  free_huge_paged(nullptr, 0);
}

TEST_CASE("a vector with HugePageAllocator grows, copies and compares like any vector") {
  std::vector<float, HugePageAllocator<float>> v(3 * kHugePageBytes / sizeof(float));
  std::iota(v.begin(), v.end(), 0.0f);
  CHECK(reinterpret_cast<uintptr_t>(v.data()) % kHugePageBytes == 0);
  const auto copy = v;
  CHECK(copy == v);
  v.resize(v.size() + 10, -1.0f);  // reallocates: the old mapping is freed with its own size
  CHECK(v[copy.size() - 1] == copy.back());
  CHECK(v.back() == -1.0f);
  v.resize(7);
  v.shrink_to_fit();  // a malloc block now
  CHECK(v == std::vector<float, HugePageAllocator<float>>{0, 1, 2, 3, 4, 5, 6});
}
