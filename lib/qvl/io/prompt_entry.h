// One prompt-cache entry on disk: the decoder's keys and values for the
// first tokens of a prompt (session/prompt_cache.h), with what is needed to
// refuse it unless it is whole and for exactly the prompt at hand. Torch-free:
// the payload is bytes, laid out as the KV cache holds it.
//
// Layout (little endian; offsets from the start of the file):
//   0   "QVLPKV\r\n"                    magic
//   8   u64 checksum                    checksum64 of every byte from offset 16 to the end
//   16  u64 file size
//   24  u32 format version, u32 zero
//   32  u64 key length, key bytes       the text of everything the KV depends on
//       u64 token count, i32 token ids  the prefix the KV is for
//       i64 next position               the rotary position the next token takes
//       i64 layers, kv heads, head dim, bytes per value
//       zero padding to a multiple of 64
//   payload, 64-byte aligned: for each layer its keys then its values, each
//       [kv heads, tokens, head dim] values.
// Torn, truncated or damaged files fail the size or checksum check.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qvl/io/mapped_file.h"

namespace qvl {

// A fast 64-bit checksum for finding damage (not an adversary): any change
// of one 8-byte word changes it, as does any change of length.
class Checksum64 {
 public:
  void update(const void* data, size_t size);
  uint64_t digest() const;  // may be called at any point; update() may go on after it

 private:
  void block(const uint8_t* p);
  uint64_t lanes_[4] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull};
  uint8_t buffer_[32] = {};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};
uint64_t checksum64(const void* data, size_t size);

struct KvLayout {
  int64_t layers = 0, kv_heads = 0, head_dim = 0, value_bytes = 0;
  bool operator==(const KvLayout& o) const {
    return layers == o.layers && kv_heads == o.kv_heads && head_dim == o.head_dim && value_bytes == o.value_bytes;
  }
};

struct PromptEntryHeader {
  std::string key;
  std::vector<int32_t> tokens;
  int64_t next_position = 0;
  KvLayout layout;
  // Bytes of one [kv heads, tokens, head dim] block, and of the whole payload.
  uint64_t block_bytes() const;
  uint64_t payload_bytes() const { return block_bytes() * uint64_t(2 * layout.layers); }
};

// A contiguous piece of the payload; the pieces are written one after another.
struct ByteRange {
  const void* data;
  size_t size;
};

constexpr uint32_t kPromptEntryVersion = 1;

// Writes the entry to `path` as it is (publishing it atomically is the
// folder's job: io/prompt_cache_dir.h). Throws qvl::Error when the pieces do
// not add up to the header's payload size or the file cannot be written.
void write_prompt_entry(const std::string& path, const PromptEntryHeader& header, const std::vector<ByteRange>& payload);

// An entry mapped from disk and checked whole: magic, version, size, checksum
// and a payload that matches the header. Throws qvl::Error saying what is wrong.
class PromptEntryFile {
 public:
  explicit PromptEntryFile(const std::string& path);
  const PromptEntryHeader& header() const { return header_; }
  const uint8_t* payload() const { return payload_; }  // header().payload_bytes() bytes, 64-byte aligned
  // Layer `layer`'s keys (kind 0) or values (kind 1).
  const uint8_t* block(int64_t layer, int kind) const;

 private:
  MappedFile file_;
  PromptEntryHeader header_;
  const uint8_t* payload_ = nullptr;
};

}  // namespace qvl
