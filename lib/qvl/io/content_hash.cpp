#include "qvl/io/content_hash.h"

#include <cstring>

namespace qvl {
namespace {

// Odd 64-bit constants with well-spread bits (from the digits of pi and e).
constexpr uint64_t kMulA = 0x243f6a8885a308d3ull | 1;
constexpr uint64_t kMulB = 0xb7e151628aed2a6bull;
constexpr uint64_t kMulC = 0x9e3779b97f4a7c15ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);  // unaligned-safe; compiles to one load
  return v;
}

// One lane's step: every input bit reaches every lane bit within a few words.
inline uint64_t step(uint64_t lane, uint64_t word) { return rotl(lane + word * kMulB, 29) * kMulA; }

// Spreads the final state so nearby inputs give unrelated hashes.
inline uint64_t finish(uint64_t h) {
  h ^= h >> 31;
  h *= kMulC;
  h ^= h >> 29;
  h *= kMulB;
  return h ^ (h >> 32);
}

}  // namespace

uint64_t content_hash(const void* data, size_t size, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t lanes[4] = {seed + kMulA, seed ^ kMulB, seed - kMulC, ~seed};
  size_t left = size;
  for (; left >= 32; p += 32, left -= 32)
    for (int i = 0; i < 4; ++i) lanes[i] = step(lanes[i], load64(p + 8 * i));
  // The last 0..31 bytes, zero-padded; the length below tells them from zeros.
  uint8_t tail[32] = {};
  std::memcpy(tail, p, left);
  for (int i = 0; i < 4; ++i) lanes[i] = step(lanes[i], load64(tail + 8 * i));
  uint64_t h = uint64_t(size) * kMulC;
  for (int i = 0; i < 4; ++i) h = step(h ^ lanes[i], rotl(lanes[i], 17 * i + 7));
  return finish(h);
}

}  // namespace qvl
