#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/safetensors_writer.h"
#include "qvl/model/checkpoint_layout.h"
#include "qvl/model/config.h"
#include "test_support.h"

using namespace qvl;

namespace {

nlohmann::json tiny_config_json() {
  return nlohmann::json::parse(read_text_file(test::tiny_model_dir() + "/config.json"));
}
ModelConfig config_from(const nlohmann::json& j) { return parse_model_config(j.dump()); }

std::string validation_error(const Checkpoint& ck, const ModelConfig& cfg) {
  try {
    validate_checkpoint(ck, cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("expected_tensors of the tiny config is exactly the reference checkpoint's tensor list") {
  const auto& reference = test::goldens()["tiny_checkpoint_tensors"];
  const auto expected = expected_tensors(load_model_config(test::tiny_model_dir()));
  std::map<std::string, std::vector<int64_t>> ours;
  for (const auto& t : expected) {
    CHECK_MESSAGE(ours.emplace(t.name, t.shape).second, "listed twice: " << t.name);
  }
  for (auto it = reference.begin(); it != reference.end(); ++it) {
    auto found = ours.find(it.key());
    REQUIRE_MESSAGE(found != ours.end(), "reference tensor missing from the layout: " << it.key());
    CHECK_MESSAGE(found->second == (*it)["shape"].get<std::vector<int64_t>>(), it.key());
  }
  for (const auto& [name, shape] : ours) CHECK_MESSAGE(reference.contains(name), "not in the reference: " << name);
  CHECK(ours.size() == reference.size());
}

TEST_CASE("the 2B config implies the published model's 2.128 B parameters") {
  const auto cfg = load_model_config(test::data_path("qwen3-vl-2b"));
  int64_t params = 0;
  for (const auto& t : expected_tensors(cfg)) params += element_count(t.shape);
  CHECK(params > 2127500000);
  CHECK(params < 2128500000);
}

TEST_CASE("validate_checkpoint accepts the tiny checkpoint with its own config") {
  Checkpoint ck(test::tiny_model_dir());
  CHECK_NOTHROW(validate_checkpoint(ck, load_model_config(test::tiny_model_dir())));
}

TEST_CASE("validate_checkpoint names the first tensor the config disagrees with") {
  Checkpoint ck(test::tiny_model_dir());

  SUBCASE("another hidden size") {
    auto j = tiny_config_json();
    j["text_config"]["hidden_size"] = 64;
    j["vision_config"]["out_hidden_size"] = 64;
    CHECK(validation_error(ck, config_from(j)) ==
          "checkpoint tensor 'model.language_model.embed_tokens.weight' has shape [151936,32], config implies "
          "[151936,64]");
  }
  SUBCASE("another MLP width") {
    auto j = tiny_config_json();
    j["text_config"]["intermediate_size"] = 64;
    CHECK(validation_error(ck, config_from(j)) ==
          "checkpoint tensor 'model.language_model.layers.0.mlp.gate_proj.weight' has shape [96,32], config implies "
          "[64,32]");
  }
  SUBCASE("the 2B config") {
    // More layers than the checkpoint holds is told first, from the names alone.
    const std::string err = validation_error(ck, load_model_config(test::data_path("qwen3-vl-2b")));
    CHECK(err == "config.json says num_hidden_layers 28 but the checkpoint holds 4 text layers");
    auto j = nlohmann::json::parse(read_text_file(test::data_path("qwen3-vl-2b/config.json")));
    j["text_config"]["num_hidden_layers"] = 4;
    j["vision_config"]["depth"] = 5;
    j["vision_config"]["deepstack_visual_indexes"] = {1, 2, 3};
    const std::string shape_err = validation_error(ck, config_from(j));
    CHECK(shape_err.find("'model.language_model.embed_tokens.weight'") != std::string::npos);
    CHECK(shape_err.find("[151936,2048]") != std::string::npos);
  }
  SUBCASE("absurd layer counts fail from the names, before the expected list is built") {
    auto j = tiny_config_json();
    j["text_config"]["num_hidden_layers"] = 1000000000;
    CHECK(validation_error(ck, config_from(j)) ==
          "config.json says num_hidden_layers 1000000000 but the checkpoint holds 4 text layers");
    j = tiny_config_json();
    j["vision_config"]["depth"] = 1000000;
    CHECK(validation_error(ck, config_from(j)) ==
          "config.json says vision_config.depth 1000000 but the checkpoint holds 5 vision blocks");
  }
  SUBCASE("a dtype label that disagrees with config.json") {
    auto j = tiny_config_json();
    j["text_config"]["dtype"] = "float16";
    CHECK(validation_error(ck, config_from(j)).find("is labelled BF16 but config.json says float16") !=
          std::string::npos);
  }
  SUBCASE("untied output projection: lm_head.weight is missing") {
    auto j = tiny_config_json();
    j["tie_word_embeddings"] = false;
    j["text_config"]["tie_word_embeddings"] = false;
    CHECK(validation_error(ck, config_from(j)) ==
          "checkpoint has no tensor 'lm_head.weight' (config implies shape [151936,32])");
  }
  SUBCASE("attention biases the checkpoint does not have") {
    auto j = tiny_config_json();
    j["text_config"]["attention_bias"] = true;
    CHECK(validation_error(ck, config_from(j)).find("'model.language_model.layers.0.self_attn.q_proj.bias'") !=
          std::string::npos);
  }
  SUBCASE("fewer layers than the weights hold") {
    auto j = tiny_config_json();
    j["text_config"]["num_hidden_layers"] = 3;
    const std::string err = validation_error(ck, config_from(j));
    CHECK(err.find("checkpoint tensor 'model.language_model.layers.3.") == 0);
    CHECK(err.find("is not part of the model") != std::string::npos);
  }
  SUBCASE("fewer deepstack levels than the weights hold") {
    auto j = tiny_config_json();
    j["vision_config"]["deepstack_visual_indexes"] = {1, 2};
    CHECK(validation_error(ck, config_from(j)).find("'model.visual.deepstack_merger_list.2.") !=
          std::string::npos);
  }
}

TEST_CASE("validate_checkpoint rejects a tensor that is not floating point") {
  // A whole model at toy size: vocab 8, one layer, one vision block.
  auto j = tiny_config_json();
  j["text_config"]["vocab_size"] = 8;
  j["text_config"]["num_hidden_layers"] = 1;
  j["vision_config"]["depth"] = 1;
  j["vision_config"]["deepstack_visual_indexes"] = {0};
  j["vision_config"]["num_position_embeddings"] = 4;
  const ModelConfig cfg = config_from(j);
  const auto expected = expected_tensors(cfg);
  const std::string dir = "/tmp/qvl_test_" + std::to_string(::getpid()) + "_int_ckpt";
  ::mkdir(dir.c_str(), 0755);
  std::vector<std::vector<float>> storage;
  std::vector<TensorToWrite> tensors;
  for (const auto& t : expected) {
    storage.emplace_back(size_t(element_count(t.shape)), 0.0f);
    const bool as_int = t.name == "model.language_model.norm.weight";
    tensors.push_back({t.name, as_int ? DType::I32 : DType::F32, t.shape, storage.back().data()});
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  {
    Checkpoint ck(dir);
    CHECK(validation_error(ck, cfg) ==
          "checkpoint tensor 'model.language_model.norm.weight' has dtype I32, expected BF16, F16 or F32");
  }
  ::unlink((dir + "/model.safetensors").c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("shape_string spells shapes as the error messages do") {
  CHECK(shape_string({96, 32}) == "[96,32]");
  CHECK(shape_string({}) == "[]");
  CHECK(element_count({64, 3, 2, 16, 16}) == 98304);
}
