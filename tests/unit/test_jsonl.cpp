// Reading back JSONL output as a killed or resumed run leaves it.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <unistd.h>

#include "qvl/io/jsonl.h"

using namespace qvl;

TEST_CASE("jsonl: complete lines become records in order") {
  const JsonlContents c = parse_jsonl("{\"file\":\"a.png\",\"n\":1}\n{\"file\":\"b.png\",\"n\":2}\n");
  REQUIRE(c.records.size() == 2);
  CHECK(c.records[0]["file"] == "a.png");
  CHECK(c.records[1]["n"] == 2);
  CHECK_FALSE(c.partial_last_line);
  CHECK(c.unreadable_lines == 0);
}

TEST_CASE("jsonl: a last line without newline is cut short and ignored, even if it parses") {
  const JsonlContents cut = parse_jsonl("{\"file\":\"a.png\"}\n{\"file\":\"b.p");
  CHECK(cut.records.size() == 1);
  CHECK(cut.partial_last_line);
  // A run killed just before writing the newline: only the newline says a record is whole.
  const JsonlContents looks_whole = parse_jsonl("{\"file\":\"a.png\"}\n{\"file\":\"b.png\"}");
  CHECK(looks_whole.records.size() == 1);
  CHECK(looks_whole.partial_last_line);
}

TEST_CASE("jsonl: a closed-off partial line in the middle is counted, not fatal") {
  const JsonlContents c = parse_jsonl("{\"file\":\"a.png\"}\n{\"file\":\"b.p\n{\"file\":\"b.png\"}\n[1,2]\n\n  \n");
  REQUIRE(c.records.size() == 2);
  CHECK(c.records[1]["file"] == "b.png");
  CHECK(c.unreadable_lines == 2);  // the cut record and the array
  CHECK_FALSE(c.partial_last_line);
}

TEST_CASE("jsonl: empty text, a missing file and a real file") {
  CHECK(parse_jsonl("").records.empty());
  CHECK_FALSE(parse_jsonl("").partial_last_line);
  const JsonlContents missing = read_jsonl_file("/nonexistent-dir-for-qvl-tests/out.jsonl");
  CHECK(missing.records.empty());
  CHECK_FALSE(missing.partial_last_line);

  char path[] = "/tmp/qvl-jsonl-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string text = "{\"file\":\"x.jpg\",\"sha256\":\"ab\"}\n{\"fi";
  REQUIRE(::write(fd, text.data(), text.size()) == ssize_t(text.size()));
  ::close(fd);
  const JsonlContents c = read_jsonl_file(path);
  std::remove(path);
  REQUIRE(c.records.size() == 1);
  CHECK(c.records[0]["sha256"] == "ab");
  CHECK(c.partial_last_line);
}

TEST_CASE("jsonl: file names that are not UTF-8 round-trip through put_path and get_path") {
  const std::vector<std::string> names = {"plain.png", "caf\xc3\xa9.png", "a\xe9" "b.png", "a\xff" "b.png",
                                          std::string("\x80\x81\x82", 3), ""};
  std::set<std::string> lines;
  for (const std::string& name : names) {
    CAPTURE(name);
    nlohmann::ordered_json record;
    put_path(record, "file", name);
    record["page"] = 1;
    const std::string line = record.dump();  // throws on invalid UTF-8: none is left
    CHECK(record.contains("file_b64") == (name.find_first_of("\xe9\xff\x80") != std::string::npos));
    CHECK(get_path(nlohmann::json::parse(line), "file") == name);
    lines.insert(line);
  }
  CHECK(lines.size() == names.size());  // a\xe9b and a\xffb stay apart
  CHECK(get_path(nlohmann::json::parse(R"({"file":"x.png"})"), "file") == "x.png");  // as older qvl wrote it
  CHECK_FALSE(get_path(nlohmann::json::parse(R"({"file":"x","file_b64":"@@"})"), "file"));
  CHECK_FALSE(get_path(nlohmann::json::parse(R"({"page":1})"), "file"));
}

TEST_CASE("jsonl: base64 as RFC 4648 writes it") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}, {std::string("\xff\x00\xfe", 3), "/wD+"}};
  for (const auto& [bytes, text] : cases) {
    CHECK(base64_encode(bytes) == text);
    CHECK(base64_decode(text) == bytes);
  }
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v!A==", "=Zg=", "Zg==Zg=="}) CHECK_FALSE(base64_decode(bad));
}
