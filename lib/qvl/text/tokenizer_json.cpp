#include "qvl/text/tokenizer_json.h"

#include <fmt/core.h>

#include <algorithm>

#include "qvl/error.h"

namespace qvl {

namespace {

using nlohmann::json;

// SAX events become either entries of the vocab/merges lists or nodes of the
// small settings document.
class Reader : public nlohmann::json_sax<json> {
 public:
  Reader(TokenizerJson& out, const std::string& text, const std::string& source)
      : out_(out), text_(text), source_(source) {}

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override { return value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t&) override { return fail("unexpected binary value"); }

  bool string(string_t& s) override {
    if (section_ == kMergePair) {
      pair_.push_back(std::move(s));
      return true;
    }
    if (section_ == kMerges) {  // the older spelling: "left right" in one string
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return fail(fmt::format("merge #{} is \"{}\", expected two tokens", out_.merges.size(), s));
      out_.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      return true;
    }
    return value(json(std::move(s)));
  }

  bool start_object(std::size_t) override {
    if (section_ == kVocabNext) {
      section_ = kVocab;
      return true;
    }
    if (section_ != kSettings) return fail(where() + ": unexpected object");
    open(json::object());
    return true;
  }

  bool key(string_t& k) override {
    if (section_ == kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    // The two big lists sit in the "model" object at the top level.
    if (stack_.size() == 2 && in_model_ && (k == "vocab" || k == "merges")) {
      section_ = k == "vocab" ? kVocabNext : kMergesNext;
      return true;
    }
    key_ = std::move(k);
    return true;
  }

  bool end_object() override {
    if (section_ == kVocab) {
      section_ = kSettings;
      return true;
    }
    close();
    return true;
  }

  bool start_array(std::size_t) override {
    if (section_ == kMergesNext) {
      section_ = kMerges;
    } else if (section_ == kMerges) {
      section_ = kMergePair;
      pair_.clear();
    } else if (section_ == kSettings) {
      open(json::array());
    } else {
      return fail(where() + ": unexpected array");
    }
    return true;
  }

  bool end_array() override {
    if (section_ == kMergePair) {
      if (pair_.size() != 2) return fail(fmt::format("merge #{} is not a pair of tokens", out_.merges.size()));
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      section_ = kMerges;
    } else if (section_ == kMerges) {
      section_ = kSettings;
    } else {
      close();
    }
    return true;
  }

  // In our words, not nlohmann's ("[json.exception.parse_error.101] ..."):
  // which file, where (the byte the parser stopped at), and the text around it.
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    if (position >= text_.size() + 1 || text_.empty())
      throw Error(fmt::format("{}: not valid JSON: the file ends before the JSON does (cut short by a failed "
                              "download?)",
                              source_));
    const size_t at = position == 0 ? 0 : std::min(position - 1, text_.size() - 1);
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at; ++i)
      if (text_[i] == '\n') {
        line += 1;
        line_start = i + 1;
      }
    size_t line_end = text_.find('\n', at);
    if (line_end == std::string::npos) line_end = text_.size();
    const size_t from = std::max(line_start, at >= 20 ? at - 20 : size_t(0));
    const size_t to = std::min(line_end, at + 20);
    std::string near;
    for (size_t i = from; i < to; ++i) {
      const unsigned char c = static_cast<unsigned char>(text_[i]);
      near += c >= 0x20 && c < 0x7f ? std::string(1, char(c)) : fmt::format("\\x{:02x}", c);
    }
    throw Error(fmt::format("{}: not valid JSON at line {}, column {} (byte offset {}), near '{}'", source_, line,
                            at - line_start + 1, at, near));
  }

 private:
  enum Section { kSettings, kVocabNext, kVocab, kMergesNext, kMerges, kMergePair };

  bool value(json v) {
    switch (section_) {
      case kSettings:
        place(std::move(v));
        return true;
      case kVocab:
        if (!v.is_number_integer() || v.get<int64_t>() < 0)
          return fail(fmt::format("vocab entry '{}' has id {}, not a token id", vocab_key_, v.dump()));
        out_.vocab.emplace_back(std::move(vocab_key_), v.get<int64_t>());
        return true;
      case kMerges:
      case kMergePair:
        return fail(fmt::format("merge #{} is not a pair of tokens", out_.merges.size()));
      default:
        return fail(where() + " is not " + (section_ == kVocabNext ? "an object" : "an array"));
    }
  }

  json* place(json v) {
    if (stack_.empty()) {
      out_.settings = std::move(v);
      return &out_.settings;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  void open(json container) {
    const bool is_model = stack_.size() == 1 && key_ == "model";
    stack_.push_back(place(std::move(container)));
    if (stack_.size() == 2) in_model_ = is_model;
  }
  void close() {
    stack_.pop_back();
    if (stack_.size() < 2) in_model_ = false;
  }

  std::string where() const {
    return section_ == kVocabNext || section_ == kVocab ? "model.vocab" : "model.merges";
  }
  bool fail(const std::string& what) { throw Error(fmt::format("{}: {}", source_, what)); }

  TokenizerJson& out_;
  const std::string& text_;
  const std::string& source_;
  Section section_ = kSettings;
  std::vector<json*> stack_;  // the open containers of the settings document
  std::string key_;
  bool in_model_ = false;
  std::string vocab_key_;
  std::vector<std::string> pair_;
};

}  // namespace

TokenizerJson read_tokenizer_json(const std::string& text, const std::string& source) {
  TokenizerJson out;
  out.vocab.reserve(160000);
  out.merges.reserve(160000);
  Reader reader(out, text, source);
  json::sax_parse(text, &reader);
  return out;
}

}  // namespace qvl
