#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "qvl/error.h"
#include "qvl/text/chat.h"
#include "test_support.h"

using namespace qvl;

namespace {
const nlohmann::json& chat_goldens() { return test::goldens()["chat_template"]; }

std::string render_case(const std::string& messages_key, ChatOptions opt) {
  return render_chat(parse_messages(chat_goldens()["messages"][messages_key]), opt);
}
}  // namespace

TEST_CASE("chat prompts are byte-identical to the reference template for every golden case") {
  const auto& rendered = chat_goldens()["rendered"];
  for (auto it = chat_goldens()["messages"].begin(); it != chat_goldens()["messages"].end(); ++it) {
    CAPTURE(it.key());
    CHECK(render_case(it.key(), {}) == rendered[it.key()].get<std::string>());
  }
  // Variants rendered by the reference with options on.
  ChatOptions vision_ids;
  vision_ids.add_vision_id = true;
  CHECK(render_case("two_images", vision_ids) == rendered["one_image_add_vision_id"].get<std::string>());
  ChatOptions no_gen;
  no_gen.add_generation_prompt = false;
  CHECK(render_case("multi_turn", no_gen) == rendered["multi_turn_no_generation_prompt"].get<std::string>());
}

TEST_CASE("model case prompts render as the reference processor saw them") {
  // Each model case's prompt_text is what the processor received before pad expansion.
  for (auto it = test::goldens()["model_cases"].begin(); it != test::goldens()["model_cases"].end(); ++it) {
    CAPTURE(it.key());
    if (!chat_goldens()["messages"].contains(it.key())) continue;
    CHECK(render_case(it.key(), {}) == (*it)["prompt_text"].get<std::string>());
  }
}

TEST_CASE("image pads expand to grid_t*grid_h*grid_w/4 tokens each") {
  const std::string pad = "<|image_pad|>";
  std::string p = "a<|vision_start|><|image_pad|><|vision_end|>b<|vision_start|><|image_pad|><|vision_end|>";
  std::string e = expand_image_pads(p, {3, 1});
  CHECK(e == "a<|vision_start|>" + pad + pad + pad + "<|vision_end|>b<|vision_start|>" + pad + "<|vision_end|>");
  CHECK_THROWS_AS(expand_image_pads(p, {3}), Error);
  CHECK_THROWS_AS(expand_image_pads(p, {3, 1, 2}), Error);
  // one_image: small.png has grid 1x14x20, so 70 pads, as in the golden input ids.
  const auto& one = test::goldens()["model_cases"]["one_image"];
  auto ids = one["input_ids"].get<std::vector<int64_t>>();
  int64_t pads = std::count(ids.begin(), ids.end(), 151655);
  auto grid = one["image_grid_thw"][0].get<std::vector<int64_t>>();
  CHECK(pads == grid[0] * grid[1] * grid[2] / 4);
}

TEST_CASE("messages JSON: shapes, relative image paths and errors") {
  auto msgs = parse_messages(nlohmann::json::parse(
                                 R"([{"role":"user","content":[{"type":"image","image":"a.jpg"},{"type":"text","text":"hi"}]}])"),
                             "/data");
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].parts[0].image == "/data/a.jpg");
  CHECK(image_paths(msgs) == std::vector<std::string>{"/data/a.jpg"});
  auto abs = parse_messages(nlohmann::json::parse(R"([{"role":"user","content":[{"image":"/x/b.png"}]}])"), "/data");
  CHECK(abs[0].parts[0].image == "/x/b.png");
  CHECK_THROWS_AS(parse_messages(nlohmann::json::parse(R"({"role":"user"})")), Error);
  CHECK_THROWS_AS(parse_messages(nlohmann::json::parse(R"([{"content":"x"}])")), Error);
  CHECK_THROWS_AS(parse_messages(nlohmann::json::parse(R"([{"role":"wizard","content":"x"}])")), Error);
  CHECK_THROWS_AS(parse_messages(nlohmann::json::parse(R"([{"role":"user","content":[{"type":"video","video":"v.mp4"}]}])")), Error);
  CHECK_THROWS_AS(parse_messages(nlohmann::json::parse(R"([{"role":"user","content":[{"type":"image","image":"https://x/y.png"}]}])")), Error);
  // Round trip through JSON keeps the rendering.
  auto again = parse_messages(messages_to_json(msgs));
  CHECK(render_chat(again) == render_chat(msgs));
}

TEST_CASE("messages file: image paths are relative to the file's folder") {
  std::string path = "/tmp/qvl_test_msgs.json";
  std::ofstream(path) << R"([{"role":"user","content":[{"type":"image","image":"img/p.png"},{"type":"text","text":"?"}]}])";
  auto msgs = parse_messages_file(path);
  CHECK(msgs[0].parts[0].image == "/tmp/img/p.png");
  std::ofstream(path) << "not json";
  CHECK_THROWS_WITH_AS(parse_messages_file(path), doctest::Contains("not valid JSON"), Error);
}
