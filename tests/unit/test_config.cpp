#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/model/config.h"
#include "test_support.h"

using namespace qvl;
using nlohmann::json;

TEST_CASE("tiny config as published: rope settings inside text_config.rope_scaling") {
  ModelConfig c = load_model_config(test::tiny_model_dir());
  CHECK(c.text.hidden_size == 32);
  CHECK(c.text.num_hidden_layers == 4);
  CHECK(c.text.num_attention_heads == 4);
  CHECK(c.text.num_key_value_heads == 2);
  CHECK(c.text.head_dim == 128);
  CHECK(c.text.rope_theta == 5000000.0);
  CHECK(c.text.mrope_section == std::array<int64_t, 3>{24, 20, 20});
  CHECK(c.text.mrope_interleaved);
  CHECK(c.text.tie_word_embeddings);
  CHECK(c.vision.depth == 5);
  CHECK(c.vision.deepstack_visual_indexes == std::vector<int64_t>{1, 2, 3});
  CHECK(c.vision.out_hidden_size == 32);
  CHECK(c.image_token_id == 151655);
}

TEST_CASE("the layout transformers 5 writes (rope_parameters) reads the same") {
  const json& saved = test::goldens()["tiny_saved_config_by_transformers"];
  REQUIRE(saved["text_config"].contains("rope_parameters"));
  ModelConfig a = load_model_config(test::tiny_model_dir());
  ModelConfig b = parse_model_config(saved.dump());
  CHECK(b.text.rope_theta == a.text.rope_theta);
  CHECK(b.text.mrope_section == a.text.mrope_section);
  CHECK(b.text.hidden_size == a.text.hidden_size);
  CHECK(b.vision.depth == a.vision.depth);
}

TEST_CASE("the 2B config") {
  ModelConfig c = load_model_config(test::data_path("qwen3-vl-2b"));
  CHECK(c.text.hidden_size == 2048);
  CHECK(c.text.num_hidden_layers == 28);
  CHECK(c.vision.deepstack_visual_indexes == std::vector<int64_t>{5, 11, 17});
  GenerationConfig g = load_generation_config(test::data_path("qwen3-vl-2b"));
  CHECK(g.do_sample);
  CHECK(g.top_k == 20);
  CHECK(g.top_p == doctest::Approx(0.8));
  CHECK(g.temperature == doctest::Approx(0.7));
  CHECK(g.eos_token_ids == std::vector<int64_t>{151645, 151643});
}

TEST_CASE("missing optional fields take reference defaults; bad ones are clear errors") {
  json j = json::parse(read_text_file(test::tiny_model_dir() + "/config.json"));
  j["text_config"].erase("rope_scaling");
  j["text_config"].erase("rms_norm_eps");
  ModelConfig c = parse_model_config(j.dump());
  CHECK(c.text.mrope_section == std::array<int64_t, 3>{24, 20, 20});
  CHECK(c.text.rms_norm_eps == 1e-6);

  json bad = json::parse(read_text_file(test::tiny_model_dir() + "/config.json"));
  bad["model_type"] = "llava";
  CHECK_THROWS_WITH_AS(parse_model_config(bad.dump()), doctest::Contains("model_type 'llava' is not supported"), Error);
  CHECK_THROWS_WITH_AS(parse_model_config("{oops"), doctest::Contains("not valid JSON"), Error);
  json wrong_type = json::parse(read_text_file(test::tiny_model_dir() + "/config.json"));
  wrong_type["text_config"]["hidden_size"] = "big";
  CHECK_THROWS_WITH_AS(parse_model_config(wrong_type.dump()), doctest::Contains("hidden_size"), Error);
  CHECK_THROWS_AS(load_model_config("/nonexistent"), Error);
}

TEST_CASE("preprocessor and generation configs") {
  PreprocessorConfig p = load_preprocessor_config(test::tiny_model_dir());
  CHECK(p.min_pixels == 65536);
  CHECK(p.max_pixels == 16777216);
  CHECK(p.patch_size == 16);
  CHECK(p.merge_size == 2);
  CHECK(p.temporal_patch_size == 2);
  GenerationConfig g = load_generation_config(test::tiny_model_dir());
  CHECK_FALSE(g.do_sample);
  CHECK(g.eos_token_ids == std::vector<int64_t>{151645, 151643});
  CHECK(parse_generation_config(R"({"eos_token_id": 7})").eos_token_ids == std::vector<int64_t>{7});
  GenerationConfig absent = load_generation_config("/nonexistent");  // optional file: defaults
  CHECK(absent.top_k == 50);
  CHECK_THROWS_AS(parse_preprocessor_config(R"({"min_pixels": 10, "max_pixels": 5})"), Error);
}
