#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "qvl/error.h"
#include "qvl/text/tokenizer.h"
#include "qvl/text/tokenizer_split.h"
#include "qvl/text/unicode.h"
#include "test_support.h"

using namespace qvl;
using nlohmann::json;

namespace {

const Tokenizer& qwen_tokenizer() {
  static const Tokenizer tok = Tokenizer::load_from_model_dir(test::tiny_model_dir());
  return tok;
}

const json& tokenizer_json() {
  static const json j = json::parse(read_text_file(test::tiny_model_dir() + "/tokenizer.json"));
  return j;
}

std::vector<TokenId> ids_of(const json& j) { return j.get<std::vector<TokenId>>(); }

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string_view> views;
  split_words(text, views);
  return std::vector<std::string>(views.begin(), views.end());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The token whose bytes are exactly `bytes` (a single-byte token, say).
TokenId id_with_bytes(const Tokenizer& tok, std::string_view bytes) {
  for (size_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.token_bytes(static_cast<TokenId>(id)) == bytes) return static_cast<TokenId>(id);
  return -1;
}

// A minimal tokenizer.json: the Qwen pipeline over a vocab of the 256 bytes
// plus the given merges (spelled in the byte-level alphabet, which is plain
// ASCII for letters).
std::string tiny_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges) {
  json root = tokenizer_json();
  json vocab = json::object();
  for (const auto& [spelled, id] : tokenizer_json()["model"]["vocab"].items())
    if (id.get<int>() < 256) vocab[spelled] = id;  // the single bytes come first in Qwen's vocab
  int next = 1000;
  json merge_list = json::array();
  for (const auto& [left, right] : merges) {
    if (!vocab.contains(left + right)) vocab[left + right] = next++;
    merge_list.push_back({left, right});
  }
  root["model"]["vocab"] = vocab;
  root["model"]["merges"] = merge_list;
  root["added_tokens"] = json::array({{{"id", 2000}, {"content", "<s>"}, {"special", true}},
                                      {{"id", 2001}, {"content", "<s>x"}, {"special", false}}});
  return root.dump();
}

}  // namespace

TEST_CASE("tokenizer: vocabulary, added tokens and lookups agree with tokenizer.json") {
  const Tokenizer& tok = qwen_tokenizer();
  const json& file = tokenizer_json();
  const size_t bpe_count = file["model"]["vocab"].size();
  const size_t added_count = file["added_tokens"].size();
  CHECK(bpe_count == 151643);
  CHECK(added_count == 26);
  CHECK(tok.vocab_size() == bpe_count + added_count);

  // One assertion for the whole vocab: doctest is slow at 150 000 of them.
  std::string first_mismatch;
  for (const auto& [spelled, id] : file["model"]["vocab"].items()) {
    const TokenId expected = id.get<TokenId>();
    if (first_mismatch.empty() && (tok.token_to_id(spelled) != expected || tok.id_to_token(expected) != spelled ||
                                   tok.is_special(expected)))
      first_mismatch = spelled;
  }
  CHECK(first_mismatch == "");
  for (const json& added : file["added_tokens"]) {
    const TokenId id = added["id"].get<TokenId>();
    CHECK(tok.token_to_id(added["content"].get<std::string>()) == id);
    CHECK(tok.id_to_token(id) == added["content"].get<std::string>());
    CHECK(tok.is_special(id) == added["special"].get<bool>());
  }
  CHECK(tok.token_to_id("no such token") == -1);
  CHECK(tok.id_to_token(-1) == "");
  CHECK(tok.id_to_token(static_cast<TokenId>(tok.vocab_size())) == "");
  CHECK_FALSE(tok.is_special(static_cast<TokenId>(tok.vocab_size())));
}

TEST_CASE("tokenizer: every reference case encodes and decodes exactly") {
  const Tokenizer& tok = qwen_tokenizer();
  const json& cases = test::goldens()["tokenizer"]["cases"];
  REQUIRE(cases.size() > 20);
  for (const json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    const std::vector<TokenId> expected = ids_of(c["ids"]);
    CHECK(tok.encode(text) == expected);
    CHECK(tok.decode(expected) == c["decoded"].get<std::string>());
    CHECK(tok.decode(expected, /*skip_special=*/true) == c["decoded_skip_special"].get<std::string>());
  }
}

TEST_CASE("tokenizer: chat prompts encode to the reference input ids, image pads expanded") {
  const Tokenizer& tok = qwen_tokenizer();
  const TokenId image_pad = tok.token_to_id("<|image_pad|>");
  REQUIRE(image_pad == 151655);
  for (const auto& [name, model_case] : test::goldens()["model_cases"].items()) {
    CAPTURE(name);
    const std::vector<TokenId> expected = ids_of(model_case["input_ids"]);
    const auto pads = static_cast<size_t>(std::count(expected.begin(), expected.end(), image_pad));
    std::string prompt = model_case["prompt_text"].get<std::string>();
    std::string expanded;
    for (size_t i = 0; i < pads; ++i) expanded += "<|image_pad|>";
    if (pads > 0) {
      const size_t at = prompt.find("<|image_pad|>");
      REQUIRE(at != std::string::npos);
      prompt.replace(at, std::string("<|image_pad|>").size(), expanded);
    }
    CHECK(tok.encode(prompt) == expected);
  }
}

TEST_CASE("tokenizer: streaming decode gives valid UTF-8 at every step and the full text at the end") {
  const Tokenizer& tok = qwen_tokenizer();
  int held_back = 0;  // steps where a character was incomplete
  for (const json& c : test::goldens()["tokenizer"]["cases"]) {
    for (bool skip_special : {false, true}) {
      CAPTURE(c["text"].get<std::string>());
      CAPTURE(skip_special);
      StreamDecoder stream(tok, skip_special);
      std::string text;
      for (TokenId id : ids_of(c["ids"])) {
        const std::string piece = stream.push(id);
        CHECK(unicode::is_valid_utf8(piece));
        if (piece.empty() && !tok.token_bytes(id).empty() && !(skip_special && tok.is_special(id))) ++held_back;
        text += piece;
      }
      const std::string rest = stream.finish();
      CHECK(unicode::is_valid_utf8(rest));
      text += rest;
      CHECK(text == c[skip_special ? "decoded_skip_special" : "decoded"].get<std::string>());
    }
  }
  CHECK(held_back > 0);  // the cases do split characters across tokens
}

TEST_CASE("tokenizer: bytes that never form a character come out as U+FFFD, in stream and batch alike") {
  const Tokenizer& tok = qwen_tokenizer();
  const TokenId lead_e4 = id_with_bytes(tok, "\xE4");
  const TokenId cont_b8 = id_with_bytes(tok, "\xB8");
  const TokenId letter_a = id_with_bytes(tok, "a");
  REQUIRE(lead_e4 >= 0);
  REQUIRE(cont_b8 >= 0);
  REQUIRE(letter_a >= 0);
  const std::string fffd = "\xEF\xBF\xBD";

  StreamDecoder stream(tok);
  CHECK(stream.push(lead_e4) == "");
  CHECK(stream.push(cont_b8) == "");       // E4 B8 is still the start of a character
  CHECK(stream.push(letter_a) == fffd + "a");  // ... which 'a' breaks: one replacement
  CHECK(stream.push(cont_b8) == fffd);     // a lone continuation byte
  CHECK(stream.push(lead_e4) == "");
  CHECK(stream.finish() == fffd);          // cut off at the end
  CHECK(stream.finish() == "");
  CHECK(tok.decode({lead_e4, cont_b8, letter_a, cont_b8, lead_e4}) == fffd + "a" + fffd + fffd);
  CHECK(tok.decode({-5, 151700, letter_a}) == "a");  // ids outside the vocabulary are skipped
}

TEST_CASE("tokenizer: streaming random ids always matches decoding them at once") {
  // Random ids split characters in every possible way, including bytes that
  // never become a character, special tokens and ids outside the vocabulary.
  const Tokenizer& tok = qwen_tokenizer();
  uint32_t state = 99;
  auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  for (int round = 0; round < 300; ++round) {
    std::vector<TokenId> ids(next() % 12);
    for (TokenId& id : ids) {
      const uint32_t r = next() >> 8;
      id = r % 4 == 0 ? TokenId(r % 256) : r % 50 == 1 ? TokenId(151643 + r % 40) : TokenId(r % 151643);
    }
    for (bool skip_special : {false, true}) {
      StreamDecoder stream(tok, skip_special);
      std::string text;
      bool all_valid = true;
      for (TokenId id : ids) {
        const std::string piece = stream.push(id);
        all_valid = all_valid && unicode::is_valid_utf8(piece);
        text += piece;
      }
      text += stream.finish();
      CHECK(all_valid);
      CHECK(text == tok.decode(ids, skip_special));
    }
  }
}

static double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

TEST_CASE("tokenizer: a 100 kB word without spaces encodes quickly and decodes back to itself") {
  const Tokenizer& tok = qwen_tokenizer();
  std::string latin, chinese;
  uint32_t state = 7;
  const std::string hanzi[] = {"图", "表", "趋", "势", "金", "额", "发", "票"};
  while (latin.size() < 100000) {
    state = state * 1664525u + 1013904223u;
    latin += static_cast<char>('a' + (state >> 16) % 26);
    chinese += hanzi[(state >> 20) % 8];
  }
  for (const std::string* word : {&latin, &chinese}) {
    REQUIRE(words_of(*word).size() == 1);
    // This thread's CPU time, not the wall clock: other processes on a busy
    // machine must not fail the test, and a quadratic merge loop takes minutes.
    const double t0 = thread_cpu_seconds();
    const std::vector<TokenId> ids = tok.encode(*word);
    const double seconds = thread_cpu_seconds() - t0;
    CHECK(ids.size() < word->size());  // merges happened
    CHECK(tok.decode(ids) == *word);
    CHECK(seconds < 0.5 * test::time_scale());
  }
}

TEST_CASE("tokenizer: the pre-tokenizer splits like the reference's regex") {
  // Expected pieces worked out by hand from the pattern, alternative by alternative.
  CHECK(words_of("Hello  world") == std::vector<std::string>{"Hello", " ", " world"});
  CHECK(words_of("x   ") == std::vector<std::string>{"x", "   "});
  CHECK(words_of("a \n b") == std::vector<std::string>{"a", " \n", " b"});
  CHECK(words_of("a\n \tb") == std::vector<std::string>{"a", "\n", " ", "\tb"});
  CHECK(words_of("I'M they'RE o'clock") ==
        std::vector<std::string>{"I", "'M", " they", "'RE", " o", "'clock"});
  CHECK(words_of("'x") == std::vector<std::string>{"'x"});
  CHECK(words_of("12ab3") == std::vector<std::string>{"1", "2", "ab", "3"});
  CHECK(words_of("!!!\n\nx") == std::vector<std::string>{"!!!\n\n", "x"});
  CHECK(words_of("x ??y") == std::vector<std::string>{"x", " ??", "y"});
  CHECK(words_of("(含税)") == std::vector<std::string>{"(含税", ")"});
  CHECK(words_of("\xC2\xA0word") == std::vector<std::string>{"\xC2\xA0word"});  // NBSP is \s, not \r\n
  CHECK(words_of("a\r\n") == std::vector<std::string>{"a", "\r\n"});
  CHECK(words_of("½²") == std::vector<std::string>{"½", "²"});  // \p{N} includes No
  CHECK(words_of("").empty());
}

TEST_CASE("tokenizer: merges apply by rank, leftmost first on ties; added tokens match longest first") {
  const Tokenizer tok = Tokenizer::parse(tiny_tokenizer_json({{"a", "a"}, {"b", "c"}, {"a", "bc"}}), "tiny.json");
  const TokenId a = tok.token_to_id("a"), aa = tok.token_to_id("aa"), bc = tok.token_to_id("bc"),
                abc = tok.token_to_id("abc");
  REQUIRE(std::min({a, aa, bc, abc}) >= 0);
  CHECK(tok.encode("aaa") == std::vector<TokenId>{aa, a});
  CHECK(tok.encode("aaaa") == std::vector<TokenId>{aa, aa});
  // "aa" outranks "abc": the second 'a' joins the first, not "bc".
  CHECK(tok.encode("aabc") == std::vector<TokenId>{aa, bc});
  CHECK(tok.encode("abc") == std::vector<TokenId>{abc});
  CHECK(tok.encode("<s>x<s>") == std::vector<TokenId>{2001, 2000});
  CHECK(tok.decode({2001, 2000}, /*skip_special=*/true) == "<s>x");
}

TEST_CASE("tokenizer: NFC normalization happens before BPE") {
  const Tokenizer& tok = qwen_tokenizer();
  CHECK(tok.encode("cafe\xCC\x81") == tok.encode("caf\xC3\xA9"));  // e + combining acute = é
}

TEST_CASE("tokenizer: clear errors") {
  CHECK(error_of([] { Tokenizer::load_from_model_dir("/nonexistent/model"); })
            .find("/nonexistent/model/tokenizer.json") != std::string::npos);
  CHECK(error_of([] { qwen_tokenizer().encode("ok \xFF bad"); }).find("not valid UTF-8 (byte 3") !=
        std::string::npos);
  // In our words: the file, the place, what was there; not nlohmann's "[json.exception...]".
  const std::string garbage = error_of([] { Tokenizer::parse("{\"a\": 1,\n  not json", "broken.json"); });
  CHECK(garbage.find("broken.json: not valid JSON at line 2, column 4") == 0);
  CHECK(garbage.find("json.exception") == std::string::npos);
  CHECK(error_of([] { Tokenizer::parse("{\"a\": [1, 2", "cut.json"); }).find("cut.json: not valid JSON: the file ends before the JSON does") !=
        std::string::npos);
  json wrong_type = json::parse(tiny_tokenizer_json({}));
  wrong_type["added_tokens"] = json::array({{{"id", "seven"}, {"content", "x"}}});
  const std::string typed = error_of([&] { Tokenizer::parse(wrong_type.dump(), "typed.json"); });
  CHECK(typed.find("typed.json: ") == 0);
  CHECK(typed.find("json.exception") == std::string::npos);

  json other_split = json::parse(tiny_tokenizer_json({}));
  other_split["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+";
  CHECK(error_of([&] { Tokenizer::parse(other_split.dump(), "t.json"); }).find("t.json: unsupported pre_tokenizer") ==
        0);
  json missing_merge = json::parse(tiny_tokenizer_json({{"a", "b"}}));
  missing_merge["model"]["merges"].push_back({"x", "zz"});
  CHECK(error_of([&] { Tokenizer::parse(missing_merge.dump(), "t.json"); }).find("needs 'zz'") != std::string::npos);
}
