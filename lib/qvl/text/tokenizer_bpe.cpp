#include "qvl/text/tokenizer_bpe.h"

#include <algorithm>

namespace qvl {

BytePairEncoder::BytePairEncoder(const std::array<TokenId, 256>& byte_tokens, const std::vector<BpeMerge>& merges)
    : byte_tokens_(byte_tokens) {
  size_t capacity = 16;
  int bits = 4;
  while (capacity * 2 < merges.size() * 3) capacity *= 2, ++bits;  // load factor <= 2/3
  shift_ = 64 - bits;
  table_.assign(capacity, Entry{kEmpty, 0, 0});
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMerge& m = merges[rank];
    const uint64_t key = key_of(m.left, m.right);
    size_t slot = slot_of(key);
    while (table_[slot].key != kEmpty && table_[slot].key != key) slot = (slot + 1) & (capacity - 1);
    if (table_[slot].key == key) continue;
    table_[slot] = Entry{key, static_cast<uint32_t>(rank), m.merged};
  }
}

const BytePairEncoder::Entry* BytePairEncoder::find(TokenId left, TokenId right) const {
  if (table_.empty()) return nullptr;
  const uint64_t key = key_of(left, right);
  const size_t mask = table_.size() - 1;
  for (size_t slot = slot_of(key);; slot = (slot + 1) & mask) {
    const Entry& e = table_[slot];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

void BytePairEncoder::encode_word(std::string_view word, BpeScratch& scratch, std::vector<TokenId>& out) const {
  const int32_t n = static_cast<int32_t>(word.size());
  if (n == 0) return;
  if (n == 1) {
    out.push_back(byte_tokens_[static_cast<unsigned char>(word[0])]);
    return;
  }
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  symbols.resize(static_cast<size_t>(n));
  heap.clear();
  for (int32_t i = 0; i < n; ++i)
    symbols[i] = {byte_tokens_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};

  // std heap functions build a max-heap: "less" means lower priority, i.e. a
  // higher rank, or the same rank further right.
  auto lower_priority = [](const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const Entry* e = find(symbols[pos].id, symbols[next].id)) {
      heap.push_back({e->rank, pos});
      std::push_heap(heap.begin(), heap.end(), lower_priority);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), lower_priority);
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& left = symbols[top.pos];
    if (left.id < 0 || left.next < 0) continue;
    // The pair may have changed since it was queued; ranks identify pairs.
    const Entry* e = find(left.id, symbols[left.next].id);
    if (!e || e->rank != top.rank) continue;
    BpeScratch::Symbol& right = symbols[left.next];
    left.id = e->merged;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace qvl
