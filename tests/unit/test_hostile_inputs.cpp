// What a hostile tester feeds qvl, at the library level: files that are not
// regular files, configs whose values cannot give an answer, NaN logits, text
// far longer than any context.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/generate/sampler.h"
#include "qvl/image/decode.h"
#include "qvl/io/file_scan.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/sha256.h"
#include "qvl/model/config.h"
#include "qvl/text/chat.h"
#include "test_support.h"

using namespace qvl;

namespace {

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

nlohmann::json tiny_config_json() {
  return nlohmann::json::parse(read_text_file(test::tiny_model_dir() + "/config.json"));
}

}  // namespace

TEST_CASE("FIFOs, sockets and devices are refused without being opened") {
  const std::string dir = "/tmp/qvl_test_" + std::to_string(::getpid()) + "_special";
  ::mkdir(dir.c_str(), 0755);
  const std::string fifo = dir + "/fifo.jpg";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO for reading would block this test for good: each of these must throw at once.
  CHECK(error_of([&] { read_text_file(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { MappedFile m(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { sha256_file_hex(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { decode_image_file(fifo); }) == fifo + ": not a regular file (a FIFO)");
  CHECK(error_of([&] { open_regular_file(fifo); }) == fifo + ": not a regular file (a FIFO)");

  const std::string sock = dir + "/sock.png";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(error_of([&] { decode_image_file(sock); }) == sock + ": not a regular file (a socket)");
  ::close(s);

  // /dev/zero never ends: refused by type, not read until memory runs out.
  CHECK(error_of([] { read_text_file("/dev/zero"); }) == "/dev/zero: not a regular file (a character device)");
  CHECK(error_of([] { decode_image_file("/dev/zero"); }) == "/dev/zero: not a regular file (a character device)");
  CHECK(error_of([&] { read_text_file(dir); }).find("(a directory)") != std::string::npos);
  CHECK(error_of([&] { read_text_file(dir + "/missing"); }).find("cannot open") != std::string::npos);

  ::unlink(fifo.c_str());
  ::unlink(sock.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("read_text_file: a size limit") {
  const std::string path = test::tiny_model_dir() + "/config.json";
  CHECK(read_text_file(path).size() > 100);
  CHECK(error_of([&] { read_text_file(path, 100); }).find("over the limit of 100 bytes") != std::string::npos);
}

TEST_CASE("config values that cannot give an answer are refused") {
  for (double eps : {0.0, -1e-6, 1.0}) {
    auto j = tiny_config_json();
    j["text_config"]["rms_norm_eps"] = eps;
    CHECK(error_of([&] { parse_model_config(j.dump()); }).find("rms_norm_eps") != std::string::npos);
  }
  for (double theta : {0.0, -1.0}) {
    auto j = tiny_config_json();
    j["text_config"]["rope_theta"] = theta;
    CHECK(error_of([&] { parse_model_config(j.dump()); }).find("rope_theta") != std::string::npos);
  }
  auto j = tiny_config_json();
  CHECK(parse_model_config(j.dump()).weights_dtype == "bfloat16");
  j["text_config"]["dtype"] = "int4";
  CHECK(error_of([&] { parse_model_config(j.dump()); }).find("dtype 'int4' is not supported") != std::string::npos);
}

TEST_CASE("NaN or Inf logits are an error naming the checkpoint") {
  std::vector<float> logits(1000, 0.5f);
  check_logits_finite(logits.data(), int64_t(logits.size()));
  logits[17] = std::numeric_limits<float>::quiet_NaN();
  CHECK(error_of([&] { check_logits_finite(logits.data(), int64_t(logits.size())); })
            .find("the checkpoint contains NaN or Inf") != std::string::npos);
  logits[17] = -std::numeric_limits<float>::infinity();
  CHECK(error_of([&] { check_logits_finite(logits.data(), int64_t(logits.size())); }).find("1 infinite") !=
        std::string::npos);
  SamplingOptions greedy;
  Sampler sampler(greedy);
  CHECK(error_of([&] { sampler.next(logits.data(), int64_t(logits.size()), {}, {}); }).find("NaN or Inf") !=
        std::string::npos);
}

TEST_CASE("no token of the Qwen vocab is longer than kMaxBytesPerToken") {
  // The bound that lets a prompt be refused from its length before tokenizing.
  const auto j = nlohmann::json::parse(read_text_file(test::tiny_model_dir() + "/tokenizer.json"));
  size_t longest = 0;
  for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it) {
    // Byte-level spelling: each byte is one code point of 1 or 2 UTF-8 bytes.
    size_t code_points = 0;
    for (unsigned char c : it.key()) code_points += (c & 0xC0) != 0x80;
    longest = std::max(longest, code_points);
  }
  for (const auto& a : j["added_tokens"]) longest = std::max(longest, a["content"].get<std::string>().size());
  CHECK(longest == 128);
  CHECK(int64_t(longest) <= kMaxBytesPerToken);
  std::vector<Message> m = {{"user", {{ContentPart::Kind::Text, "abc", ""}, {ContentPart::Kind::Image, "", "x.png"}}},
                            {"assistant", {{ContentPart::Kind::Text, "de", ""}}}};
  CHECK(text_bytes(m) == 5);
}

TEST_CASE("--glob ignores case, as the default extension filter does") {
  CHECK(scan_takes("a.png", {false, "*.PNG"}));
  CHECK(scan_takes("SCAN.Tif.png", {false, "*.tif.png"}));
  CHECK_FALSE(scan_takes("a.jpg", {false, "*.PNG"}));
}
