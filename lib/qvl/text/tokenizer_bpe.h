// Byte-pair encoding of one word, on raw bytes. The merges are applied in
// rank order, leftmost first among equal ranks, exactly as the reference does.
// A min-heap of candidate pairs over a linked list of symbols keeps a word of
// n bytes at O(n log n), so even a 100 kB word without spaces is quick.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace qvl {

using TokenId = int32_t;

struct BpeMerge {
  TokenId left;
  TokenId right;
  TokenId merged;
};

// Buffers reused from one word to the next, so that encoding allocates only
// when a word is longer than any before it.
struct BpeScratch {
  struct Symbol {
    TokenId id;  // -1 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;  // the left symbol of the pair
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
};

class BytePairEncoder {
 public:
  BytePairEncoder() = default;
  // byte_tokens[b]: the token of the single byte b. merges: highest priority
  // first; a pair listed twice keeps its first rank.
  BytePairEncoder(const std::array<TokenId, 256>& byte_tokens, const std::vector<BpeMerge>& merges);

  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<TokenId>& out) const;

 private:
  struct Entry {
    uint64_t key;  // left << 32 | right; kEmpty when unused
    uint32_t rank;
    TokenId merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key_of(TokenId left, TokenId right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  // Open addressing with linear probing: the merge lookup is the inner loop.
  const Entry* find(TokenId left, TokenId right) const;
  size_t slot_of(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> shift_); }

  std::array<TokenId, 256> byte_tokens_{};
  std::vector<Entry> table_;
  int shift_ = 64;
};

}  // namespace qvl
