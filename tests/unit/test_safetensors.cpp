#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <unistd.h>

#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/safetensors_writer.h"
#include "test_support.h"

using namespace qvl;

namespace {
std::string tmp_path(const std::string& name) { return "/tmp/qvl_test_" + std::to_string(::getpid()) + "_" + name; }

// Writes a raw safetensors file from a header string and a data size.
std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes, int64_t claimed_len = -1) {
  std::string p = tmp_path(name);
  std::ofstream out(p, std::ios::binary);
  uint64_t len = claimed_len >= 0 ? uint64_t(claimed_len) : header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header;
  out << std::string(data_bytes, '\0');
  return p;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsFile f(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("sharded tiny checkpoint: every tensor of the reference list, with its dtype and shape") {
  Checkpoint ck(test::tiny_model_dir());
  const auto& expected = test::goldens()["tiny_checkpoint_tensors"];
  CHECK(ck.files().size() == 2);
  CHECK(ck.names().size() == expected.size());
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const TensorView* t = ck.find(it.key());
    REQUIRE_MESSAGE(t != nullptr, it.key());
    CHECK(std::string(dtype_name(t->dtype)) == (*it)["dtype"].get<std::string>());
    CHECK(t->file.substr(t->file.rfind('/') + 1) == (*it)["file"].get<std::string>());
    std::vector<int64_t> shape = (*it)["shape"].get<std::vector<int64_t>>();
    CHECK(t->shape == shape);
    CHECK(t->nbytes == size_t(t->numel()) * dtype_size(t->dtype));
  }
}

TEST_CASE("fixture goldens file reads as U8/I64/F32 views") {
  SafetensorsFile f(test::data_path("goldens_model.safetensors"));
  const TensorView& ids = f.get("one_image.input_ids");
  CHECK(ids.dtype == DType::I64);
  CHECK(ids.shape == std::vector<int64_t>{86});
  int64_t first = 0;  // copied: the fixture's int64 data is not 8-byte aligned
  std::memcpy(&first, ids.data, sizeof first);
  CHECK(first == 151644);  // <|im_start|>, as goldens.json says
  CHECK(f.get("one_image.visual_pos_masks").dtype == DType::U8);
  CHECK_THROWS_AS(f.get("no.such.tensor"), Error);
}

TEST_CASE("write then read round trip") {
  float a[6] = {1, 2, 3, 4, 5, 6};
  int64_t b[2] = {7, -8};
  std::string p = tmp_path("rt.safetensors");
  write_safetensors(p, {{"a", DType::F32, {2, 3}, a}, {"b", DType::I64, {2}, b}}, {{"k", "v"}});
  SafetensorsFile f(p);
  CHECK(f.get("a").shape == std::vector<int64_t>{2, 3});
  CHECK(f.get("a").as<float>()[5] == 6.0f);
  CHECK(f.get("b").as<int64_t>()[1] == -8);
  CHECK(f.metadata().at("k") == "v");
  CHECK(reinterpret_cast<uintptr_t>(f.get("b").data) % 8 == 0);
  std::remove(p.c_str());
}

TEST_CASE("invalid headers are one-line errors naming file and tensor") {
  SUBCASE("too short") {
    std::string p = tmp_path("short");
    std::ofstream(p) << "abc";
    CHECK(error_of(p).find("not a safetensors file") != std::string::npos);
  }
  SUBCASE("header length beyond the file") {
    auto p = write_raw("hl", "{}", 0, 1000);
    CHECK(error_of(p).find("does not fit") != std::string::npos);
  }
  SUBCASE("malformed json") {
    auto p = write_raw("mj", "{\"a\": [", 0);
    CHECK(error_of(p).find("not a JSON object") != std::string::npos);
  }
  SUBCASE("offsets outside the data section") {
    auto p = write_raw("oob", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    std::string e = error_of(p);
    CHECK(e.find("'w'") != std::string::npos);
    CHECK(e.find("outside the data section") != std::string::npos);
  }
  SUBCASE("byte length does not match the shape") {
    auto p = write_raw("len", R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8);
    CHECK(error_of(p).find("does not match dtype and shape") != std::string::npos);
  }
  SUBCASE("overlapping tensors") {
    auto p = write_raw("ov", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12);
    CHECK(error_of(p).find("overlaps") != std::string::npos);
  }
  SUBCASE("duplicate names") {
    auto p = write_raw("dup", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
    CHECK(error_of(p).find("appears twice") != std::string::npos);
  }
  SUBCASE("unknown dtype") {
    auto p = write_raw("dt", R"({"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1);
    CHECK(error_of(p).find("unsupported dtype") != std::string::npos);
  }
  SUBCASE("negative dimension") {
    auto p = write_raw("neg", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
    CHECK(error_of(p).find("negative") != std::string::npos);
  }
}

TEST_CASE("a missing checkpoint folder names what it looked for") {
  CHECK_THROWS_WITH_AS(Checkpoint("/nonexistent-dir"), doctest::Contains("no model.safetensors"), Error);
}
