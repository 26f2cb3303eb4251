#include "qvl/text/tokenizer.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/text/tokenizer_json.h"
#include "qvl/text/tokenizer_split.h"
#include "qvl/text/tokenizer_tables.h"
#include "qvl/text/unicode.h"

namespace qvl {

using nlohmann::json;

namespace {

// GPT-2's byte-level alphabet: each byte is spelled as a printable character
// so that vocab entries are readable strings. Printable bytes stand for
// themselves; the others take code points from U+0100 up, in byte order.
class ByteAlphabet {
 public:
  ByteAlphabet() {
    byte_of_char_.fill(-1);
    int next_extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      char_of_byte_[b] = printable ? char32_t(b) : char32_t(256 + next_extra++);
      byte_of_char_[char_of_byte_[b]] = static_cast<int16_t>(b);
    }
  }
  char32_t char_of(uint8_t byte) const { return char_of_byte_[byte]; }
  // The bytes a spelled token stands for; false if it uses a character
  // outside the alphabet.
  bool to_bytes(std::string_view spelled, std::string& bytes) const {
    bytes.clear();
    const char* end = spelled.data() + spelled.size();
    for (const char* p = spelled.data(); p < end;) {
      unicode::Utf8Step step = unicode::next_utf8(p, end);
      if (step.status != unicode::Utf8Status::kOk || step.codepoint >= byte_of_char_.size() ||
          byte_of_char_[step.codepoint] < 0)
        return false;
      bytes += static_cast<char>(byte_of_char_[step.codepoint]);
      p += step.length;
    }
    return true;
  }
  std::string spell(std::string_view bytes) const {
    std::string out;
    for (unsigned char b : bytes) unicode::append_utf8(char_of(b), out);
    return out;
  }

 private:
  std::array<char32_t, 256> char_of_byte_{};
  std::array<int16_t, 324> byte_of_char_{};  // 256 + the 68 non-printable bytes
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

struct AddedToken {
  std::string content;
  TokenId id;
};

struct AddedMatch {
  size_t start;  // text.size() when there is none
  size_t length;
  TokenId id;
};

// Ids index flat arrays; a file asking for more is broken, not big.
constexpr int64_t kMaxTokenId = 1 << 24;

std::string describe(const json& j) {
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

}  // namespace

struct Tokenizer::Impl {
  TokenizerTables tables;
  BytePairEncoder bpe;
  std::unordered_map<std::string, TokenId> added_to_id;
  // Added tokens by first byte, longest first, for leftmost-longest matching.
  std::array<std::vector<AddedToken>, 256> added_by_first_byte;

  // `index`: the vocab by bytes if the caller has it; else it is built at the
  // first token_to_id() (encoding never needs it).
  explicit Impl(TokenizerTables t, std::optional<VocabIndex> index = std::nullopt)
      : tables(std::move(t)), bpe(tables.byte_tokens, tables.merges) {
    if (index) {
      vocab_index_ = std::move(*index);
      std::call_once(vocab_index_once_, [] {});
    }
    for (const auto& [content, id] : tables.added) {
      added_to_id[content] = id;
      added_by_first_byte[static_cast<unsigned char>(content[0])].push_back({content, id});
    }
    for (auto& candidates : added_by_first_byte)
      std::sort(candidates.begin(), candidates.end(),
                [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }

  const VocabIndex& vocab_index() const {
    std::call_once(vocab_index_once_, [this] { vocab_index_ = VocabIndex(tables); });
    return vocab_index_;
  }

  AddedMatch find_added(std::string_view text, size_t from) const {
    for (size_t i = from; i < text.size(); ++i) {
      const auto& candidates = added_by_first_byte[static_cast<unsigned char>(text[i])];
      for (const AddedToken& t : candidates)
        if (text.compare(i, t.content.size(), t.content) == 0) return {i, t.content.size(), t.id};
    }
    return {text.size(), 0, -1};
  }

  // Text without added tokens: normalize, split into words, BPE each word.
  void encode_plain(std::string_view text, std::vector<TokenId>& ids) const {
    if (text.empty()) return;
    std::string normalized;
    if (tables.normalize_nfc && !unicode::surely_nfc(text)) {
      normalized = unicode::nfc(text);
      text = normalized;
    }
    std::vector<std::string_view> words;
    split_words(text, words);
    BpeScratch scratch;
    for (std::string_view word : words) bpe.encode_word(word, scratch, ids);
  }

 private:
  mutable std::once_flag vocab_index_once_;
  mutable VocabIndex vocab_index_;
};

namespace {

const json& require(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw Error(fmt::format("{}: missing \"{}\"", where, key));
  return *it;
}

bool is_false_or_absent(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() || (it->is_boolean() && !it->get<bool>());
}

bool is_empty_or_absent(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

// The pipeline must be the one this file implements: anything else would
// encode differently from the reference without any error.
void check_pipeline(const json& root, const std::string& source, bool* normalize_nfc) {
  const json normalizer = root.value("normalizer", json());
  if (normalizer.is_null()) {
    *normalize_nfc = false;
  } else if (normalizer.value("type", "") == "NFC") {
    *normalize_nfc = true;
  } else {
    throw Error(fmt::format("{}: unsupported normalizer {}", source, describe(normalizer)));
  }

  const json& pre = require(root, "pre_tokenizer", source);
  bool pre_ok = pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
                pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2;
  if (pre_ok) {
    const json& split = pre["pretokenizers"][0];
    const json& byte_level = pre["pretokenizers"][1];
    pre_ok = split.value("type", "") == "Split" && split.contains("pattern") && split["pattern"].is_object() &&
             split["pattern"].value("Regex", "") == kQwenSplitPattern && split.value("behavior", "") == "Isolated" &&
             is_false_or_absent(split, "invert") && byte_level.value("type", "") == "ByteLevel" &&
             is_false_or_absent(byte_level, "add_prefix_space") && is_false_or_absent(byte_level, "use_regex");
  }
  if (!pre_ok) throw Error(fmt::format("{}: unsupported pre_tokenizer {}", source, describe(pre)));

  const json& decoder = require(root, "decoder", source);
  if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel")
    throw Error(fmt::format("{}: unsupported decoder {}", source, describe(decoder)));

  const json& model = require(root, "model", source);
  if (model.value("type", "") != "BPE")
    throw Error(fmt::format("{}: unsupported model type {}", source, describe(model.value("type", json()))));
  for (const char* flag : {"byte_fallback", "ignore_merges", "fuse_unk"})
    if (!is_false_or_absent(model, flag))
      throw Error(fmt::format("{}: unsupported BPE option \"{}\": true", source, flag));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (!is_empty_or_absent(model, affix))
      throw Error(fmt::format("{}: unsupported BPE option \"{}\": {}", source, affix, describe(model[affix])));
  if (model.contains("dropout") && !model["dropout"].is_null())
    throw Error(fmt::format("{}: unsupported BPE dropout {}", source, describe(model["dropout"])));
}

// Fills the tables' vocab and `index` from model.vocab.
void load_vocab(const std::vector<std::pair<std::string, int64_t>>& vocab, const std::string& source,
                TokenizerTables& tables, VocabIndex& index) {
  if (vocab.empty()) throw Error(fmt::format("{}: model.vocab is missing or empty", source));
  tables.blob.reserve(vocab.size() * 8);
  index.reserve(vocab.size());
  std::string bytes;
  for (const auto& [spelled, id64] : vocab) {
    if (id64 >= kMaxTokenId)
      throw Error(fmt::format("{}: vocab entry '{}' has id {}, too large", source, spelled, id64));
    const auto id = static_cast<TokenId>(id64);
    if (!byte_alphabet().to_bytes(spelled, bytes))
      throw Error(fmt::format("{}: vocab entry '{}' (id {}) is not in the byte-level alphabet", source, spelled, id));
    if (static_cast<size_t>(id) < tables.ids() && tables.vocab_span[id].length > 0)
      throw Error(fmt::format("{}: vocab entries '{}' and '{}' both have id {}", source,
                              byte_alphabet().spell(tables.bytes(tables.vocab_span[id])), spelled, id));
    tables.set_token(id, bytes, kTokenKnown | kTokenBpe);
    tables.vocab_span[id] = tables.span[id];
    if (!index.insert(tables, id)) throw Error(fmt::format("{}: vocab entry '{}' appears twice", source, spelled));
  }
}

// Fills the tables' merges and byte tokens; after the vocab.
void load_merges(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source,
                 TokenizerTables& tables, const VocabIndex& index) {
  std::string left_bytes, right_bytes;
  auto fail = [&](const std::string& spelled, size_t rank) {
    return Error(fmt::format("{}: merge #{} needs '{}', which is not in the vocab", source, rank, spelled));
  };
  auto id_of = [&](const std::string& spelled, std::string& bytes, size_t rank) {
    const TokenId id = byte_alphabet().to_bytes(spelled, bytes) ? index.find(tables, bytes) : -1;
    if (id < 0) throw fail(spelled, rank);
    return id;
  };
  tables.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const TokenId left_id = id_of(left, left_bytes, rank);
    const TokenId right_id = id_of(right, right_bytes, rank);
    left_bytes += right_bytes;
    const TokenId merged = index.find(tables, left_bytes);
    if (merged < 0) throw fail(left + right, rank);
    tables.merges.push_back({left_id, right_id, merged});
  }

  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const TokenId id = index.find(tables, std::string_view(&byte, 1));
    if (id < 0) {
      std::string spelled;
      unicode::append_utf8(byte_alphabet().char_of(static_cast<uint8_t>(b)), spelled);
      throw Error(fmt::format("{}: the vocab has no token for byte 0x{:02X} ('{}')", source, b, spelled));
    }
    tables.byte_tokens[b] = id;
  }
}

void load_added_tokens(const json& added, const std::string& source, TokenizerTables& tables) {
  if (added.is_null()) return;
  if (!added.is_array()) throw Error(fmt::format("{}: added_tokens is not an array", source));
  std::string bytes;
  std::unordered_map<std::string, size_t> position;  // content -> index in tables.added
  for (const json& a : added) {
    const std::string where = fmt::format("{}: added token {}", source, describe(a));
    const json& id_json = require(a, "id", where);
    const json& content_json = require(a, "content", where);
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 || id_json.get<int64_t>() >= kMaxTokenId ||
        !content_json.is_string() || content_json.get<std::string>().empty())
      throw Error(where + ": needs a non-negative id and non-empty content");
    for (const char* flag : {"lstrip", "rstrip", "single_word"})
      if (!is_false_or_absent(a, flag)) throw Error(fmt::format("{}: unsupported option \"{}\"", where, flag));
    const TokenId id = id_json.get<TokenId>();
    const std::string& content = content_json.get_ref<const std::string&>();
    if (!unicode::is_valid_utf8(content)) throw Error(where + ": content is not valid UTF-8");
    // The byte-level decoder reads a token through the alphabet when it can,
    // and takes it literally otherwise.
    if (!byte_alphabet().to_bytes(content, bytes)) bytes = content;
    tables.set_token(id, bytes, kTokenKnown | (a.value("special", false) ? kTokenSpecial : 0));
    // The same content listed again: the later id wins.
    auto [it, fresh] = position.emplace(content, tables.added.size());
    if (fresh)
      tables.added.emplace_back(content, id);
    else
      tables.added[it->second].second = id;
  }
}

}  // namespace

TokenizerTables Tokenizer::tables_from_json(const std::string& json_text, const std::string& source,
                                            VocabIndex* index_out) {
  const TokenizerJson file = read_tokenizer_json(json_text, source);
  if (!file.settings.is_object()) throw Error(fmt::format("{}: not a JSON object", source));
  TokenizerTables tables;
  VocabIndex index;
  try {
    check_pipeline(file.settings, source, &tables.normalize_nfc);
    load_vocab(file.vocab, source, tables, index);
    load_merges(file.merges, source, tables, index);
    load_added_tokens(file.settings.value("added_tokens", json()), source, tables);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    // nlohmann's what() starts "[json.exception.type_error.302] ": keep only its words.
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (what.rfind("[json.exception.", 0) == 0 && bracket != std::string::npos) what = what.substr(bracket + 2);
    throw Error(fmt::format("{}: unexpected content (a field of the wrong type?): {}", source, what));
  }
  if (index_out) *index_out = std::move(index);
  return tables;
}

Tokenizer Tokenizer::parse(const std::string& json_text, const std::string& source) {
  VocabIndex index;
  TokenizerTables tables = tables_from_json(json_text, source, &index);
  return from_tables(std::move(tables), &index);
}

Tokenizer Tokenizer::from_tables(TokenizerTables tables, VocabIndex* index) {
  if (!index) return Tokenizer(std::make_shared<Impl>(std::move(tables)));
  return Tokenizer(std::make_shared<Impl>(std::move(tables), std::move(*index)));
}

Tokenizer Tokenizer::load(const std::string& tokenizer_json_path) {
  return parse(read_text_file(tokenizer_json_path), tokenizer_json_path);
}

Tokenizer Tokenizer::load_from_model_dir(const std::string& dir) { return load_from_model_dir(dir, ""); }

std::vector<TokenId> Tokenizer::encode(std::string_view text) const {
  const size_t bad = unicode::find_invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw Error(fmt::format("cannot tokenize: the text is not valid UTF-8 (byte {} of {}: 0x{:02X})", bad,
                            text.size(), static_cast<unsigned char>(text[bad])));
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 1);
  for (size_t pos = 0; pos < text.size();) {
    const AddedMatch match = impl_->find_added(text, pos);
    impl_->encode_plain(text.substr(pos, match.start - pos), ids);
    if (match.id < 0) break;
    ids.push_back(match.id);
    pos = match.start + match.length;
  }
  return ids;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  return unicode::lossy_utf8(bytes);
}

TokenId Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_to_id.find(std::string(token)); it != impl_->added_to_id.end()) return it->second;
  std::string bytes;
  if (!byte_alphabet().to_bytes(token, bytes)) return -1;
  return impl_->vocab_index().find(impl_->tables, bytes);
}

std::string Tokenizer::id_to_token(TokenId id) const {
  const TokenizerTables& t = impl_->tables;
  if (id < 0 || static_cast<size_t>(id) >= t.ids() || !(t.flags[id] & kTokenKnown)) return "";
  if (t.flags[id] & kTokenBpe) return byte_alphabet().spell(t.bytes(t.span[id]));
  for (const auto& [content, added_id] : impl_->added_to_id)
    if (added_id == id) return content;
  return "";
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  const TokenizerTables& t = impl_->tables;
  if (id < 0 || static_cast<size_t>(id) >= t.ids()) return {};
  return t.bytes(t.span[id]);
}

bool Tokenizer::is_special(TokenId id) const {
  const TokenizerTables& t = impl_->tables;
  return id >= 0 && static_cast<size_t>(id) < t.ids() && (t.flags[id] & kTokenSpecial);
}

size_t Tokenizer::vocab_size() const { return impl_->tables.ids(); }

const TokenizerTables& Tokenizer::tables() const { return impl_->tables; }

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

std::string StreamDecoder::push(TokenId id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  std::string text;
  pending_.erase(0, unicode::append_complete_utf8(pending_, text));
  return text;
}

std::string StreamDecoder::finish() {
  std::string text = unicode::lossy_utf8(pending_);
  pending_.clear();
  return text;
}

}  // namespace qvl
