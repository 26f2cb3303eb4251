// The tokenizer cache (text/tokenizer_cache.h): a tokenizer read back from it
// is the parsed one, token for token, against the reference ids; a damaged,
// cut, foreign or stale file, or one whose checksum is right but whose ids are
// not, is never used (the JSON is parsed again and the file replaced); a
// folder that cannot be written costs only the parse.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/io/prompt_entry.h"  // checksum64
#include "qvl/text/tokenizer.h"
#include "qvl/text/tokenizer_cache.h"
#include "test_support.h"

using namespace qvl;
using nlohmann::json;

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/qvl-tokenizer-cache-test-XXXXXX";
    REQUIRE(::mkdtemp(path.data()) != nullptr);
  }
  ~Scratch() { std::system(("rm -rf '" + path + "'").c_str()); }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

const std::string& qwen_json() {
  static const std::string text = read_all(test::tiny_model_dir() + "/tokenizer.json");
  return text;
}

// A model folder holding only a tokenizer.json with this text.
std::string model_dir_with(const Scratch& s, const std::string& name, const std::string& json_text) {
  const std::string dir = s.path + "/" + name;
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  write_all(dir + "/tokenizer.json", json_text);
  return dir;
}

// The Qwen tokenizer with one more added token, "<zz>" = 151700: a
// different tokenizer.json whose tokens differ only where "<zz>" appears.
const std::string& other_json() {
  static const std::string text = [] {
    json j = json::parse(qwen_json());
    j["added_tokens"].push_back({{"id", 151700}, {"content", "<zz>"}, {"special", true}});
    return j.dump();
  }();
  return text;
}

std::string cache_path_for(const std::string& cache_dir, const std::string& json_text) {
  return tokenizer_cache_path(cache_dir, checksum64(json_text.data(), json_text.size()));
}

// Every reference case, encoded and decoded, as the reference has it.
void check_reference_cases(const Tokenizer& tok) {
  const json& cases = test::goldens()["tokenizer"]["cases"];
  REQUIRE(cases.size() > 20);
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    const auto expected = c["ids"].get<std::vector<TokenId>>();
    CHECK(tok.encode(text) == expected);
    CHECK(tok.decode(expected) == c["decoded"].get<std::string>());
    CHECK(tok.decode(expected, true) == c["decoded_skip_special"].get<std::string>());
  }
}

Tokenizer load(const std::string& dir, const std::string& cache, TokenizerCacheUse expected_use) {
  TokenizerCacheUse use = TokenizerCacheUse::kOff;
  Tokenizer tok = Tokenizer::load_from_model_dir(dir, cache, &use);
  CHECK(int(use) == int(expected_use));
  return tok;
}

}  // namespace

TEST_CASE("tokenizer cache: the tokenizer read back is the parsed one, id for id") {
  Scratch s;
  const std::string cache = s.path + "/cache";
  REQUIRE(::mkdir(cache.c_str(), 0755) == 0);
  const Tokenizer parsed = Tokenizer::load_from_model_dir(test::tiny_model_dir());
  load(test::tiny_model_dir(), cache, TokenizerCacheUse::kWritten);
  REQUIRE(::access(cache_path_for(cache, qwen_json()).c_str(), R_OK) == 0);
  const Tokenizer cached = load(test::tiny_model_dir(), cache, TokenizerCacheUse::kRead);

  check_reference_cases(cached);
  REQUIRE(cached.vocab_size() == parsed.vocab_size());
  size_t differences = 0;
  for (size_t i = 0; i < parsed.vocab_size(); ++i) {
    const auto id = TokenId(i);
    const std::string spelled = parsed.id_to_token(id);
    differences += cached.token_bytes(id) != parsed.token_bytes(id) || cached.is_special(id) != parsed.is_special(id) ||
                   cached.id_to_token(id) != spelled || (!spelled.empty() && cached.token_to_id(spelled) != id);
  }
  CHECK(differences == 0);
  CHECK(cached.encode("cafe\xCC\x81") == parsed.encode("caf\xC3\xA9"));  // NFC first: e + combining acute = é
  CHECK(cached.token_to_id("<|image_pad|>") == 151655);  // an added token (goldens: the chat prompts' pad)
  CHECK(cached.token_to_id("no such token") == -1);
}

TEST_CASE("tokenizer cache: a damaged, cut or hollow file is parsed again and replaced") {
  Scratch s;
  const std::string cache = s.path + "/cache";
  REQUIRE(::mkdir(cache.c_str(), 0755) == 0);
  load(test::tiny_model_dir(), cache, TokenizerCacheUse::kWritten);
  const std::string path = cache_path_for(cache, qwen_json());
  const std::string good = read_all(path);
  REQUIRE(good.size() > 1000000);

  // Bytes 68 to ~1 MB are the tokens' bytes, where a changed byte breaks no
  // bound: only the checksum finds it.
  SUBCASE("one byte changed among the tokens' bytes") {
    std::string bad = good;
    bad[100000] ^= 0x01;
    write_all(path, bad);
  }
  SUBCASE("one byte changed among the tables") {
    std::string bad = good;
    bad[bad.size() / 3] ^= 0x20;
    write_all(path, bad);
  }
  SUBCASE("cut short") { write_all(path, good.substr(0, good.size() / 2)); }
  SUBCASE("empty") { write_all(path, ""); }
  SUBCASE("zeros over the magic") { write_all(path, std::string(8, '\0') + good.substr(8)); }
  check_reference_cases(load(test::tiny_model_dir(), cache, TokenizerCacheUse::kWritten));
  CHECK(read_all(path) == good);  // replaced by a whole file
  load(test::tiny_model_dir(), cache, TokenizerCacheUse::kRead);
}

TEST_CASE("tokenizer cache: a file made from another tokenizer.json is never used") {
  Scratch s;
  const std::string cache = s.path + "/cache";
  REQUIRE(::mkdir(cache.c_str(), 0755) == 0);
  const std::string qwen = model_dir_with(s, "qwen", qwen_json());
  const std::string other = model_dir_with(s, "other", other_json());
  load(other, cache, TokenizerCacheUse::kWritten);
  CHECK(load(other, cache, TokenizerCacheUse::kRead).encode("a<zz>b") == std::vector<TokenId>{64, 151700, 65});

  SUBCASE("foreign: the other tokenizer's file under this one's name") {
    write_all(cache_path_for(cache, qwen_json()), read_all(cache_path_for(cache, other_json())));
    const Tokenizer tok = load(qwen, cache, TokenizerCacheUse::kWritten);
    CHECK(tok.encode("a<zz>b") != std::vector<TokenId>{64, 151700, 65});
    CHECK(tok.token_to_id("<zz>") == -1);
    check_reference_cases(tok);
  }
  SUBCASE("stale: tokenizer.json edited after the cache was written") {
    load(qwen, cache, TokenizerCacheUse::kWritten);
    write_all(qwen + "/tokenizer.json", other_json());
    CHECK(load(qwen, cache, TokenizerCacheUse::kRead).encode("a<zz>b") == std::vector<TokenId>{64, 151700, 65});
    write_all(qwen + "/tokenizer.json", qwen_json());
    CHECK(load(qwen, cache, TokenizerCacheUse::kRead).token_to_id("<zz>") == -1);
  }
}

TEST_CASE("tokenizer cache: a right checksum over wrong ids is refused") {
  const TokenizerTables tables = Tokenizer::tables_from_json(qwen_json(), "tokenizer.json");
  const uint64_t sum = checksum64(qwen_json().data(), qwen_json().size());
  auto decode = [&](const TokenizerTables& t) {
    const std::string bytes = encode_tokenizer_cache(t, sum, qwen_json().size());
    return decode_tokenizer_cache(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), sum,
                                  qwen_json().size(), "t.bin");
  };
  CHECK(decode(tables).merges.size() == tables.merges.size());
  auto refused = [&](TokenizerTables t) {
    try {
      decode(t);
    } catch (const Error& e) {
      return std::string(e.what()).find("t.bin: tokenizer cache is damaged") == 0;
    }
    return false;
  };
  TokenizerTables bad_merge = tables;
  bad_merge.merges[7].merged = TokenId(tables.ids());
  CHECK(refused(bad_merge));
  TokenizerTables bad_span = tables;
  bad_span.span[300].length = uint32_t(tables.blob.size());
  CHECK(refused(bad_span));
  TokenizerTables bad_byte = tables;
  bad_byte.byte_tokens[65] = -2;
  CHECK(refused(bad_byte));
  TokenizerTables bad_added = tables;
  bad_added.added[0].second = TokenId(tables.ids()) + 5;
  CHECK(refused(bad_added));
}

TEST_CASE("tokenizer cache: a folder that cannot be written costs only the parse") {
  Scratch s;
  write_all(s.path + "/a-file", "not a folder");
  // Root ignores permission bits; a folder under a regular file fails for everyone.
  const std::string cache = s.path + "/a-file/cache";
  check_reference_cases(load(test::tiny_model_dir(), cache, TokenizerCacheUse::kNotWritten));
  check_reference_cases(load(test::tiny_model_dir(), cache, TokenizerCacheUse::kNotWritten));
  CHECK(int(Tokenizer::load_from_model_dir(test::tiny_model_dir()).vocab_size()) > 151000);
}
