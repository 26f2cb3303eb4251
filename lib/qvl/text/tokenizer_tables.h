// Everything a loaded tokenizer is made of, in flat arrays: what parsing
// tokenizer.json produces (tokenizer.cpp) and what the tokenizer cache stores
// (tokenizer_cache.h). Flat arrays instead of a string per token and a node
// per map entry: building them from the 11 MB Qwen file, or reading them back,
// is a handful of allocations.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qvl/text/tokenizer_bpe.h"  // TokenId, BpeMerge

namespace qvl {

enum TokenFlags : uint8_t { kTokenKnown = 1, kTokenSpecial = 2, kTokenBpe = 4 };

// A piece of TokenizerTables::blob.
struct ByteSpan {
  uint32_t start = 0;
  uint32_t length = 0;
};

struct TokenizerTables {
  bool normalize_nfc = false;
  std::string blob;                 // the bytes of every token, back to back
  std::vector<ByteSpan> span;       // by id: the bytes the id decodes to (empty if unknown)
  std::vector<ByteSpan> vocab_span; // by id: its bytes as a model.vocab entry (empty if none)
  std::vector<uint8_t> flags;       // by id: TokenFlags
  std::array<TokenId, 256> byte_tokens{};
  std::vector<BpeMerge> merges;     // highest priority first
  std::vector<std::pair<std::string, TokenId>> added;  // added token content and id, each content once

  std::string_view bytes(const ByteSpan& s) const { return std::string_view(blob).substr(s.start, s.length); }
  size_t ids() const { return span.size(); }
  // Sets an id's bytes (appended to the blob) and flags, growing the arrays.
  void set_token(TokenId id, std::string_view bytes, uint8_t flags);
};

// The model.vocab entries by their bytes (open addressing over ids): the
// merges name tokens by their spelling, which maps one to one to bytes.
class VocabIndex {
 public:
  VocabIndex() = default;
  explicit VocabIndex(const TokenizerTables& tables);  // every id with a vocab_span
  void reserve(size_t entries);  // room for this many, before the first insert
  // -1 if no vocab entry has these bytes.
  TokenId find(const TokenizerTables& tables, std::string_view bytes) const;
  // Adds `id` (whose vocab_span is set); false if an entry with the same bytes is there already.
  bool insert(const TokenizerTables& tables, TokenId id);

 private:
  struct Slot {
    uint32_t tag;  // high half of the bytes' hash: most mismatches end here, without reading the bytes
    TokenId id;    // -1 when empty
  };
  static uint64_t hash_of(std::string_view bytes);
  bool insert_hashed(const TokenizerTables& tables, TokenId id, uint64_t hash);
  std::vector<Slot> slots_;
  size_t used_ = 0;
};

}  // namespace qvl
