// The Qwen3 tokenizer: byte-level BPE read from a Hugging Face tokenizer.json.
// Encoding follows the reference step by step: added tokens (e.g. <|im_start|>)
// are cut out of the raw text first, longest match first; the rest is NFC
// normalized, split into words by the pre-tokenizer and each word is BPE
// encoded over its UTF-8 bytes. Only the features the Qwen tokenizer uses are
// accepted; anything else in the file is rejected with qvl::Error at load.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qvl/text/tokenizer_bpe.h"  // TokenId

namespace qvl {

struct TokenizerTables;
class VocabIndex;

// What load_from_model_dir() did with the tokenizer cache.
enum class TokenizerCacheUse {
  kOff,         // no cache folder given
  kRead,        // loaded from the cache file
  kWritten,     // parsed tokenizer.json and wrote the cache file (missing, stale or damaged before)
  kNotWritten,  // parsed tokenizer.json; the cache file could not be written (the tokenizer works all the same)
};

class Tokenizer {
 public:
  static Tokenizer load(const std::string& tokenizer_json_path);  // throws qvl::Error
  static Tokenizer load_from_model_dir(const std::string& dir);   // dir + "/tokenizer.json"
  // The same tokenizer, the parse kept in `cache_dir` (text/tokenizer_cache.h)
  // under a name made from a checksum of tokenizer.json's bytes: a second load
  // reads the tables back instead of parsing 11 MB of JSON. A missing,
  // damaged, foreign or unwritable cache file only costs the parse. "" = no cache.
  static Tokenizer load_from_model_dir(const std::string& dir, const std::string& cache_dir,
                                       TokenizerCacheUse* use = nullptr);
  // From the JSON text itself; `source` names it in error messages.
  static Tokenizer parse(const std::string& json_text, const std::string& source = "tokenizer.json");

  // No BOS or other additions. Throws qvl::Error if `text` is not valid UTF-8.
  std::vector<TokenId> encode(std::string_view text) const;
  // Ids the vocabulary does not know are skipped, as the reference does (the
  // model's output layer is wider than the vocabulary). Bytes that do not form
  // UTF-8 come out as U+FFFD.
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const;

  TokenId token_to_id(std::string_view token) const;  // -1 if unknown
  std::string id_to_token(TokenId id) const;           // as spelled in tokenizer.json ("Ġthe"); "" if unknown
  // The bytes the id contributes to decoded text (possibly part of a
  // character); empty if unknown.
  std::string_view token_bytes(TokenId id) const;
  bool is_special(TokenId id) const;
  size_t vocab_size() const;  // largest id + 1, added tokens included

  // The parse as flat tables (what the cache stores; `index`, if given,
  // receives the vocab index the parse built), and a tokenizer made of tables
  // (taking `index` if given, else building it at the first token_to_id()).
  static TokenizerTables tables_from_json(const std::string& json_text, const std::string& source,
                                          VocabIndex* index = nullptr);
  static Tokenizer from_tables(TokenizerTables tables, VocabIndex* index = nullptr);
  const TokenizerTables& tables() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  // Shared and immutable: copies and moves are a pointer copy.
  std::shared_ptr<const Impl> impl_;
};

// Turns generated ids into text as they arrive, holding back the bytes of a
// character that is not complete yet, so every piece returned is valid UTF-8
// and the pieces concatenate to decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true);
  std::string push(TokenId id);  // the complete text this id makes available
  std::string finish();          // what is left, with an incomplete tail as U+FFFD

 private:
  Tokenizer tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace qvl
