#include "qvl/text/tokenizer_tables.h"

#include <functional>

namespace qvl {

void TokenizerTables::set_token(TokenId id, std::string_view token_bytes, uint8_t token_flags) {
  if (static_cast<size_t>(id) >= span.size()) {
    const size_t n = static_cast<size_t>(id) + 1;
    span.resize(n);
    vocab_span.resize(n);
    flags.resize(n, 0);
  }
  span[id] = ByteSpan{static_cast<uint32_t>(blob.size()), static_cast<uint32_t>(token_bytes.size())};
  blob.append(token_bytes);
  flags[id] = token_flags;
}

namespace {
// Power of two with room for `n` entries at a load factor of at most 1/2.
size_t capacity_for(size_t n) {
  size_t capacity = 1024;
  while (capacity < 2 * n) capacity *= 2;
  return capacity;
}
}  // namespace

VocabIndex::VocabIndex(const TokenizerTables& tables) {
  size_t n = 0;
  for (const ByteSpan& s : tables.vocab_span) n += s.length > 0;
  reserve(n);
  for (size_t id = 0; id < tables.vocab_span.size(); ++id)
    if (tables.vocab_span[id].length > 0) insert(tables, static_cast<TokenId>(id));
}

void VocabIndex::reserve(size_t entries) {
  if (used_ == 0 && 2 * entries > slots_.size()) slots_.assign(capacity_for(entries), Slot{0, -1});
}

uint64_t VocabIndex::hash_of(std::string_view bytes) { return std::hash<std::string_view>()(bytes); }

TokenId VocabIndex::find(const TokenizerTables& tables, std::string_view bytes) const {
  if (slots_.empty() || bytes.empty()) return -1;
  const uint64_t hash = hash_of(bytes);
  const uint32_t tag = uint32_t(hash >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const Slot& s = slots_[slot];
    if (s.id < 0) return -1;
    if (s.tag == tag && tables.bytes(tables.vocab_span[s.id]) == bytes) return s.id;
  }
}

bool VocabIndex::insert(const TokenizerTables& tables, TokenId id) {
  return insert_hashed(tables, id, hash_of(tables.bytes(tables.vocab_span[id])));
}

bool VocabIndex::insert_hashed(const TokenizerTables& tables, TokenId id, uint64_t hash) {
  if (2 * (used_ + 1) > slots_.size()) {  // grow: rehash what is there
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity_for(2 * (used_ + 1)), Slot{0, -1});
    used_ = 0;
    for (const Slot& s : old)
      if (s.id >= 0) insert(tables, s.id);
  }
  const std::string_view bytes = tables.bytes(tables.vocab_span[id]);
  const uint32_t tag = uint32_t(hash >> 32);
  const size_t mask = slots_.size() - 1;
  for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    Slot& s = slots_[slot];
    if (s.id < 0) {
      s = Slot{tag, id};
      ++used_;
      return true;
    }
    if (s.tag == tag && tables.bytes(tables.vocab_span[s.id]) == bytes) return false;
  }
}

}  // namespace qvl
