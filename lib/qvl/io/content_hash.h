// A fast 64-bit checksum for files qvl writes and reads back (the quantized
// weight caches): it catches flipped bytes and files swapped for others, not
// an adversary who recomputes it. Not a cryptographic hash; sha256.h is.
#pragma once
#include <cstddef>
#include <cstdint>

namespace qvl {

// The hash of `size` bytes at `data`, starting from `seed` (chain calls by
// passing one's result as the next seed). Four independent lanes of 64-bit
// multiply-rotate steps over 32-byte strides, so it runs at memory speed.
uint64_t content_hash(const void* data, size_t size, uint64_t seed = 0);

}  // namespace qvl
