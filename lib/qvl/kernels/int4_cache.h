// A flat file of 4-bit matrices (kernels/quant4.h), written once after
// quantizing a checkpoint and mmapped on later runs.
//
// Layout (little endian; offsets from the start of the file):
//   "QVLINT4\n"  u32 version (2)  u64 header hash  u32 count  u64 tag length, tag bytes
//   count × { u32 name length, name bytes, i64 rows, cols, padded_cols,
//             group_size, u64 levels offset, u64 params offset, u64 levels hash, u64 params hash }
//   then each matrix's levels and params, every block 64-byte aligned.
// The tag is the caller's (checkpoint fingerprint and format), so a stale
// cache can be recognised and rebuilt. Written and read with the int8 cache's
// helpers (kernels/cache_file.h).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qvl/io/mapped_file.h"
#include "qvl/kernels/quant4.h"

namespace qvl::kernels {

// Writes to `path` + ".tmp" then renames, so a crash never leaves a torn file.
void write_int4_cache(const std::string& path, const std::string& tag,
                      const std::vector<std::pair<std::string, Int4Matrix>>& matrices);

// A mapped cache file. Matrices point into the mapping: keep this alive.
class Int4Cache {
 public:
  explicit Int4Cache(const std::string& path);  // validates everything, checksums too; throws qvl::Error
  // The same matrices held in memory, for a run whose cache file cannot be written.
  Int4Cache(std::string tag, std::vector<std::pair<std::string, QuantizedInt4Matrix>> matrices);
  const std::string& tag() const { return tag_; }
  const std::map<std::string, Int4Matrix>& matrices() const { return matrices_; }
  const Int4Matrix* find(const std::string& name) const;
  const Int4Matrix& get(const std::string& name) const;  // throws naming the matrix and file

 private:
  MappedFile file_;
  std::string tag_;
  std::map<std::string, Int4Matrix> matrices_;
  std::vector<QuantizedInt4Matrix> owned_;  // the in-memory matrices' storage
};

}  // namespace qvl::kernels
