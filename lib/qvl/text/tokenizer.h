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

class Tokenizer {
 public:
  static Tokenizer load(const std::string& tokenizer_json_path);  // throws qvl::Error
  static Tokenizer load_from_model_dir(const std::string& dir);   // dir + "/tokenizer.json"
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
