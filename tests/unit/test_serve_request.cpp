// qvl serve's pieces that need no model: OpenAI request bodies, image URLs,
// stop strings and the metrics' histograms.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "qvl/serve/chat_request.h"
#include "qvl/serve/metrics.h"
#include "qvl/serve/stop_text.h"

using namespace qvl;
using namespace qvl::serve;

namespace {

// The RequestError a body gets: its param and code, or "accepted".
std::string refusal(const std::string& body, const ImagePolicy& policy = {}) {
  try {
    parse_chat_request(body, policy);
    return "accepted";
  } catch (const RequestError& e) {
    return e.param + " " + e.code;
  }
}

std::string all(StopText& stop, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += stop.push(p);
  return out + stop.finish();
}

}  // namespace

TEST_CASE("serve: a chat request's messages, images and sampling fields") {
  const ChatRequest r = parse_chat_request(R"({
    "model": "whatever", "future_field": [1],
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
                                   {"type": "text", "text": "What is it?"}]},
      {"role": "assistant", "content": "A word."},
      {"role": "user", "content": [{"type": "image_url", "image_url": "data:;base64,aGVsbG8"}]}],
    "max_tokens": 5, "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "seed": 9,
    "stop": ["x", ""], "stream": true})",
                                           {});
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].parts.size() == 2);
  CHECK(r.messages[1].parts[0].kind == ContentPart::Kind::Image);
  CHECK(r.messages[1].parts[0].image == "image-0");
  CHECK(r.messages[1].parts[1].text == "What is it?");
  CHECK(r.messages[2].parts[0].text == "A word.");
  CHECK(r.messages[3].parts[0].image == "image-1");
  REQUIRE(r.images.size() == 2);
  CHECK(std::string(r.images[0].begin(), r.images[0].end()) == "hi");
  CHECK(std::string(r.images[1].begin(), r.images[1].end()) == "hello");  // unpadded base64 too
  CHECK(r.max_tokens == 7);  // max_completion_tokens wins
  CHECK(r.temperature == 0.0);
  CHECK(r.top_p == 0.5);
  CHECK(r.top_k == 3);
  CHECK(r.seed == 9u);
  CHECK(r.stop == std::vector<std::string>{"x"});
  CHECK(r.stream);
}

TEST_CASE("serve: malformed requests name the field at fault") {
  CHECK(refusal("{") == " invalid_json");
  CHECK(refusal("{}") == "messages missing_required_parameter");
  CHECK(refusal(R"({"messages": {}})") == "messages invalid_type");
  CHECK(refusal(R"({"messages": [{"role": "user"}]})") == "messages[0].content missing_required_parameter");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})") ==
        "messages[0].content[0].type invalid_value");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})") ==
        "messages invalid_value");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 1.5})") == "max_tokens invalid_type");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "a"}], "temperature": 3})") ==
        "temperature invalid_value");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "a"}], "n": 2})") == "n invalid_value");
  CHECK(refusal(R"({"messages": [{"role": "user", "content": "a"}], "stop": [1]})") == "stop invalid_type");
  const std::string image = R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ")";
  CHECK(refusal(image + R"(http://example.com/a.png"}}]}]})") ==
        "messages[0].content[0].image_url unsupported_image_url");
  CHECK(refusal(image + R"(data:image/png;base64,a$b"}}]}]})") ==
        "messages[0].content[0].image_url invalid_image_url");
  CHECK(refusal(image + R"(data:image/png,plain"}}]}]})") == "messages[0].content[0].image_url invalid_image_url");
  CHECK(refusal(image + R"(file:///etc/passwd"}}]}]})") == "messages[0].content[0].image_url file_not_allowed");
}

TEST_CASE("serve: file:// images only from inside the allowed folders, links resolved") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("qvl-serve-test-" + std::to_string(::getpid()));
  fs::create_directories(root / "allowed");
  fs::create_directories(root / "allowed-not");
  std::ofstream(root / "allowed" / "a b.png") << "x";
  std::ofstream(root / "allowed-not" / "b.png") << "x";
  fs::create_symlink(root / "allowed-not" / "b.png", root / "allowed" / "link.png");
  const std::vector<std::string> allowed = {(root / "allowed").string()};
  const std::string url = "file://" + root.string();
  CHECK(allowed_file_path(url + "/allowed/a%20b.png", allowed) == fs::canonical(root / "allowed" / "a b.png").string());
  CHECK_THROWS_AS(allowed_file_path(url + "/allowed-not/b.png", allowed), RequestError);  // a prefix, not the folder
  CHECK_THROWS_AS(allowed_file_path(url + "/allowed/../allowed-not/b.png", allowed), RequestError);
  CHECK_THROWS_AS(allowed_file_path(url + "/allowed/link.png", allowed), RequestError);
  CHECK_THROWS_AS(allowed_file_path(url + "/allowed/missing.png", allowed), RequestError);
  CHECK_THROWS_AS(allowed_file_path(url + "/allowed/a%20b.png", {}), RequestError);
  fs::remove_all(root);
}

TEST_CASE("serve: stop strings cut the reply before the first of them, across pieces") {
  StopText none({});
  CHECK(all(none, {"ab", "cd"}) == "abcd");
  StopText one({"END"});
  CHECK(one.push("abE") == "ab");  // "E" may start "END"
  CHECK(one.push("N") == "");
  CHECK(one.push("Dxyz") == "");
  CHECK(one.stopped());
  CHECK(one.finish() == "");
  StopText false_start({"END"});
  CHECK(all(false_start, {"aEN", "x", "E"}) == "aENxE");  // never completed: all of it, at the end
  CHECK_FALSE(false_start.stopped());
  StopText earliest({"cd", "b"});
  CHECK(all(earliest, {"abcd"}) == "a");
  StopText utf8({"é!"});
  CHECK(utf8.push("caf\xC3\xA9") == "caf");  // held from the character's first byte
  CHECK(utf8.push("?") == "\xC3\xA9?");
}

TEST_CASE("serve: histograms count per bound, cumulatively, with sum and count") {
  Histogram h({1, 5});
  for (double v : {0.5, 1.0, 3.0, 7.0}) h.observe(v);
  CHECK(h.render("x") ==
        "x_bucket{le=\"1\"} 2\nx_bucket{le=\"5\"} 3\nx_bucket{le=\"+Inf\"} 4\nx_sum 11.5\nx_count 4\n");
  ServeMetrics m;
  m.request_done(200);
  m.request_done(200);
  m.request_done(503);
  m.tokens(10, 3);
  const std::string text = m.prometheus(2, 1);
  CHECK(text.find("qvl_requests_total{status=\"200\"} 2\n") != std::string::npos);
  CHECK(text.find("qvl_requests_total{status=\"503\"} 1\n") != std::string::npos);
  CHECK(text.find("qvl_prompt_tokens_total 10\n") != std::string::npos);
  CHECK(text.find("qvl_completion_tokens_total 3\n") != std::string::npos);
  CHECK(text.find("qvl_requests_running 2\n") != std::string::npos);
  CHECK(text.find("qvl_requests_queued 1\n") != std::string::npos);
}
