// The tokenizer cache: the parsed tables of a tokenizer.json (text/
// tokenizer_tables.h) in one binary file in the model's cache folder, so that
// loading the tokenizer reads ~3 MB of arrays instead of parsing 11 MB of JSON.
//
// The file is named after checksum64 (io/prompt_entry.h) of tokenizer.json's
// bytes and records that checksum and the JSON's size, so an edited
// tokenizer.json is never served from an old file. It is written to a
// temporary name and renamed into place; on reading, its own checksum and every
// id and offset are checked, and anything wrong means "parse the JSON again".
//
// Layout (little endian):
//   0   "QVLTOK\r\n"        magic
//   8   u64 checksum         checksum64 of every byte from offset 16 to the end
//   16  u64 file size
//   24  u32 format version, u32 zero
//   32  u64 tokenizer.json checksum, u64 tokenizer.json size
//   48  u32 ids, u32 blob bytes, u32 merges, u32 added tokens, u32 normalize_nfc
//       blob; span[ids], vocab_span[ids] (u32 start, u32 length); flags[ids];
//       byte_tokens[256] (i32); merges (i32 left, right, merged);
//       added tokens (i32 id, u32 length, content)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "qvl/text/tokenizer_tables.h"

namespace qvl {

constexpr uint32_t kTokenizerCacheVersion = 1;

// <cache_dir>/tokenizer-<checksum as 16 hex digits>-v<version>.bin
std::string tokenizer_cache_path(const std::string& cache_dir, uint64_t json_checksum);

// The file's bytes for `tables`, parsed from a tokenizer.json with this checksum and size.
std::string encode_tokenizer_cache(const TokenizerTables& tables, uint64_t json_checksum, uint64_t json_size);

// The tables back from a file's bytes; throws qvl::Error (naming `path`) when
// the file is damaged, of another version, or made from another tokenizer.json.
TokenizerTables decode_tokenizer_cache(const uint8_t* data, size_t size, uint64_t json_checksum, uint64_t json_size,
                                       const std::string& path);

}  // namespace qvl
