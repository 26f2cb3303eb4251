// A flat file of int8 matrices, written once after quantizing a checkpoint and
// mmapped on later runs so quantization is paid only once.
//
// Layout (little endian; offsets from the start of the file):
//   "QVLINT8\n"  u32 version (2)  u64 header hash  u32 count  u64 tag length, tag bytes
//   count × { u32 name length, name bytes, i64 rows, cols, padded_cols,
//             group_size, u64 weights offset, u64 scales offset, u64 weights hash, u64 scales hash }
//   then each matrix's weights and scales, every block 64-byte aligned.
// The tag is the caller's (e.g. the checkpoint fingerprint and group size),
// so a stale cache can be recognised and rebuilt.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qvl/io/mapped_file.h"
#include "qvl/kernels/quant.h"

namespace qvl::kernels {

// Writes to `path` + ".tmp" then renames, so a crash never leaves a torn file.
void write_int8_cache(const std::string& path, const std::string& tag,
                      const std::vector<std::pair<std::string, Int8Matrix>>& matrices);

// A mapped cache file. Matrices point into the mapping: keep this alive.
class Int8Cache {
 public:
  explicit Int8Cache(const std::string& path);  // validates everything, checksums too; throws qvl::Error
  // The same matrices held in memory, for a run whose cache file cannot be written.
  Int8Cache(std::string tag, std::vector<std::pair<std::string, QuantizedMatrix>> matrices);
  const std::string& tag() const { return tag_; }
  const std::map<std::string, Int8Matrix>& matrices() const { return matrices_; }
  const Int8Matrix* find(const std::string& name) const;
  const Int8Matrix& get(const std::string& name) const;  // throws naming the matrix and file

 private:
  MappedFile file_;
  std::string tag_;
  std::map<std::string, Int8Matrix> matrices_;
  std::vector<QuantizedMatrix> owned_;  // the in-memory matrices' storage
};

}  // namespace qvl::kernels
