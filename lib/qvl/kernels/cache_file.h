// Internal to lib/qvl/kernels: the file layout the quantized-weight caches
// (int8_cache, int4_cache) share. Writing goes through "<path>.tmp" and a
// rename, so a crash never leaves a torn file; reading never runs past the end
// of the mapping. Both throw qvl::Error naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qvl/io/mapped_file.h"

namespace qvl::kernels::cache_file {

// The layout both caches share (little endian; offsets from the file's start):
//   magic (8 bytes)  u32 version  u64 header hash  u32 count  u64 tag length, tag bytes
//   count × { u32 name length, name bytes, i64 rows, cols, padded_cols,
//             group_size, u64 values offset, u64 params offset,
//             u64 values hash, u64 params hash }
//   then each matrix's values and params, every block 64-byte aligned.
// The hashes are io/content_hash.h's: the header hash covers everything from
// the count to the last entry, so the blocks' hashes and the tag (which names
// the checkpoint the file was made from) are covered too.
// `kind` ("int8", "int4") names the file in errors ("not a qvl int8 cache file").
struct MatrixShape {
  int64_t rows = 0, cols = 0, padded_cols = 0, group_size = 0;
};
struct MatrixBlocks {  // one matrix to write
  std::string name;
  MatrixShape shape;
  const void* values = nullptr;
  uint64_t value_bytes = 0;
  const void* params = nullptr;
  uint64_t param_bytes = 0;
};
void write_matrix_file(const std::string& path, const char (&magic)[8], uint32_t version,
                       const std::string& tag, const std::vector<MatrixBlocks>& matrices);

struct MatrixEntry {  // one matrix read back: its blocks are checked by block()
  std::string name;
  MatrixShape shape;
  uint64_t values_offset = 0, params_offset = 0;
  uint64_t values_hash = 0, params_hash = 0;
};
struct MatrixFileHeader {
  std::string tag;
  std::vector<MatrixEntry> entries;
};
// Throws when the header is damaged (its checksum differs) or truncated.
MatrixFileHeader read_matrix_file(const MappedFile& file, const char* kind, const char (&magic)[8],
                                  uint32_t version);
// Throws naming the first matrix whose blocks (sizes in block_bytes, values
// then params, one pair per entry) differ from their checksums.
void verify_blocks(const MappedFile& file, const std::vector<MatrixEntry>& entries,
                   const std::vector<std::pair<uint64_t, uint64_t>>& block_bytes);
// The block [offset, offset + size) of `file`; throws naming `what` when it
// lies outside the file or is misaligned.
const uint8_t* block(const MappedFile& file, const std::string& what, uint64_t offset, uint64_t size);

}  // namespace qvl::kernels::cache_file
