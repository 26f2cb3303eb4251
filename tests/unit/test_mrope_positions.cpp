#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/mrope_positions.h"
#include "test_support.h"

using namespace qvl;

// The fixture's int64 tensors are not 8-byte aligned in the file (safetensors
// does not align tensors), so they are read by copying, not through a typed pointer.
static int64_t i64_at(const TensorView& v, int64_t i) {
  int64_t value;
  std::memcpy(&value, v.data + i * sizeof(int64_t), sizeof value);
  return value;
}

TEST_CASE("multimodal position ids equal the reference for every model case") {
  SafetensorsFile goldens(test::data_path("goldens_model.safetensors"));
  for (auto it = test::goldens()["model_cases"].begin(); it != test::goldens()["model_cases"].end(); ++it) {
    CAPTURE(it.key());
    const TensorView& ids_view = goldens.get(it.key() + ".input_ids");
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < ids_view.numel(); ++i) ids.push_back(int32_t(i64_at(ids_view, i)));
    std::vector<ImageGrid> grids;
    if (const TensorView* g = goldens.find(it.key() + ".image_grid_thw"))
      for (int64_t r = 0; r < g->shape[0]; ++r) grids.push_back({i64_at(*g, 3 * r), i64_at(*g, 3 * r + 1), i64_at(*g, 3 * r + 2)});
    MropePositions pos = mrope_positions(ids, grids, 2, 151655);
    REQUIRE(pos.ids.size() == ids.size());
    const int64_t L = int64_t(ids.size());
    if (const TensorView* expected = goldens.find(it.key() + ".position_ids")) {
      REQUIRE(expected->shape == std::vector<int64_t>{3, 1, L});
      for (int axis = 0; axis < 3; ++axis)
        for (int64_t i = 0; i < L; ++i) {
          CAPTURE(axis);
          CAPTURE(i);
          REQUIRE(pos.ids[i][axis] == i64_at(*expected, axis * L + i));
        }
      int64_t max_pos = 0;
      for (int axis = 0; axis < 3; ++axis)
        for (int64_t i = 0; i < L; ++i) max_pos = std::max(max_pos, i64_at(*expected, axis * L + i));
      CHECK(pos.next == max_pos + 1);
    } else {
      // Text only: 0..L-1 on all three axes, as FIXTURES.md says.
      for (int64_t i = 0; i < L; ++i) CHECK(pos.ids[i] == std::array<int64_t, 3>{i, i, i});
      CHECK(pos.next == L);
    }
  }
}

TEST_CASE("positions continue from a given start and reject mismatched grids") {
  const int32_t img = 151655;
  // Two images of 2x4 merged tokens (grid 1x4x8) between text, starting at 10.
  std::vector<int32_t> toks = {1, img, img, img, img, img, img, img, img, 2, img, img, img, img, img, img, img, img, 3};
  auto pos = mrope_positions(toks, {{1, 4, 8}, {1, 4, 8}}, 2, img, 10);
  CHECK(pos.ids[0] == std::array<int64_t, 3>{10, 10, 10});
  CHECK(pos.ids[1] == std::array<int64_t, 3>{11, 11, 11});
  CHECK(pos.ids[8] == std::array<int64_t, 3>{11, 12, 14});   // last token: row 1, column 3
  CHECK(pos.ids[9] == std::array<int64_t, 3>{15, 15, 15});   // text after: largest (14) + 1
  CHECK(pos.ids[18] == std::array<int64_t, 3>{20, 20, 20});
  CHECK(pos.next == 21);
  CHECK_THROWS_AS(mrope_positions(toks, {{1, 4, 8}}, 2, img), Error);
  CHECK_THROWS_AS(mrope_positions(toks, {{1, 4, 8}, {1, 4, 4}}, 2, img), Error);
}
