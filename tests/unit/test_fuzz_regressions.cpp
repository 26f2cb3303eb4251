// Replays every input the fuzzers (tests/fuzz) ever crashed on, kept in
// tests/data/fuzz-regressions/ and named <target>-<what>.<ext>, through the
// same harness the fuzz target runs. Each must now end in success or a clean
// qvl::Error; the memory errors behind some of them show up under
// scripts/test_sanitize.sh. Specific cases also check the error they get.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../fuzz/harness.h"
#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/model/config.h"
#include "test_support.h"

using namespace qvl;

namespace {

std::string regression_path(const std::string& name) { return test::data_path("fuzz-regressions/" + name); }

std::string read_regression(const std::string& name) { return read_text_file(regression_path(name)); }

const Tokenizer& tiny_tokenizer() {
  static const Tokenizer tok = Tokenizer::load_from_model_dir(test::tiny_model_dir());
  return tok;
}

// Runs one stored input through the harness of the fuzz target its name starts with.
void replay(const std::string& target, const std::string& bytes) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (target == "safetensors") {
    fuzz::run_safetensors(data, bytes.size());
  } else if (target == "checkpoint_index") {
    static const fuzz::CheckpointFolder folder;
    fuzz::run_checkpoint_index(folder, data, bytes.size());
  } else if (target == "config") {
    fuzz::run_configs(data, bytes.size());
  } else if (target == "tokenizer") {
    fuzz::run_tokenizer(tiny_tokenizer(), data, bytes.size());
  } else if (target == "image") {
    fuzz::run_image(data, bytes.size());
  } else if (target == "chat") {
    fuzz::run_chat(data, bytes.size());
  } else if (target == "jsonl") {
    fuzz::run_jsonl(data, bytes.size());
  } else if (target == "cache") {
    fuzz::run_weight_cache(data, bytes.size());
    fuzz::run_prompt_entry(data, bytes.size());
  } else {
    FAIL("no fuzz target named '" << target << "'");
  }
}

}  // namespace

TEST_CASE("fuzz regressions: every stored crash input now succeeds or throws qvl::Error") {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(test::data_path("fuzz-regressions")))
    if (entry.is_regular_file()) names.push_back(entry.path().filename().string());
  REQUIRE(!names.empty());
  for (const auto& name : names) {
    INFO("input: tests/data/fuzz-regressions/" << name);
    const std::string target = name.substr(0, name.find('-'));
    // The harness swallows qvl::Error; any other exception escaping is the bug.
    CHECK_NOTHROW(replay(target, read_regression(name)));
  }
}

TEST_CASE("fuzz regression: a float too large for int64 in an integer config field is a clean error") {
  // Was: nlohmann's float-to-int64 cast, undefined behaviour (UBSan report).
  const std::string text = read_regression("config-float-patch-size.json");
  CHECK_THROWS_WITH_AS(parse_preprocessor_config(text), doctest::Contains("'patch_size'"), Error);
}

TEST_CASE("fuzz regression: a preprocessor config that would make every image huge is rejected") {
  // Was: accepted; min_pixels 2^40 then resized a 1x1 image to 2^40 pixels
  // (bad_alloc or the OOM killer, not a qvl::Error).
  const std::string text = read_regression("config-min-pixels-2p40.json");
  CHECK_THROWS_WITH_AS(parse_preprocessor_config(text), doctest::Contains("max_pixels"), Error);
}

TEST_CASE("fuzz regression: a shape whose byte size wraps around 2^64 does not pass for an empty tensor") {
  // Was: accepted; shape [2^62] of F32 "needs" 2^64 bytes, which wrapped to 0 and
  // matched data_offsets [0, 0], so readers trusting numel() read past the file.
  const std::string path = regression_path("safetensors-shape-bytes-wrap.safetensors");
  CHECK_THROWS_WITH_AS(SafetensorsFile{path}, doctest::Contains("does not match dtype and shape"), Error);
}

TEST_CASE("cache fuzz harness: the seeds qvl's writers make are accepted, a flipped payload byte is not") {
  std::string dir = (std::filesystem::temp_directory_path() / "qvl-fuzz-seeds-XXXXXX").string();
  REQUIRE(::mkdtemp(dir.data()) != nullptr);
  fuzz::write_cache_seeds(dir);
  for (const char* name : {"int8.bin", "int4.bin"}) {
    std::string bytes = read_text_file(dir + "/" + name);
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    CHECK_MESSAGE(fuzz::run_weight_cache(data, bytes.size()), name);
    // The first byte of the last matrix's params: blocks start 64-byte
    // aligned, and the seeds' last block is shorter than 64 bytes.
    bytes[(bytes.size() - 1) / 64 * 64] ^= 0x40;
    CHECK_FALSE_MESSAGE(fuzz::run_weight_cache(data, bytes.size()), name);
  }
  const std::string entry = read_text_file(dir + "/prompt.kv");
  CHECK(fuzz::run_prompt_entry(reinterpret_cast<const uint8_t*>(entry.data()), entry.size()));
  std::filesystem::remove_all(dir);
}
