// Streaming safetensors output: the header is fixed from the list of tensors,
// then their bytes arrive in pieces, so a multi-gigabyte shard never has to be
// in memory. Output goes to "<path>.tmp" and is renamed into place by finish(),
// so a reader never sees a half-written file under the real name.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qvl/io/chunked_output.h"
#include "qvl/io/safetensors.h"

namespace qvl {

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
};

uint64_t tensor_bytes(const TensorEntry& t);

class SafetensorsWriter {
 public:
  // Creates the temporary file and writes the header; throws qvl::Error.
  SafetensorsWriter(const std::string& path, const std::vector<TensorEntry>& tensors,
                    const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();  // removes the temporary file unless finish() succeeded
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Data of the tensors in list order, in pieces of any size.
  void append(const void* data, size_t nbytes);
  // Checks every byte arrived, flushes to disk and renames into place.
  void finish();

  uint64_t data_bytes() const { return data_bytes_; }

 private:
  void write_all(const void* data, size_t nbytes);
  [[noreturn]] void fail(const std::string& what);

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  std::unique_ptr<ChunkedOutput> output_;  // writes fd_ in aligned chunks
  uint64_t data_bytes_ = 0;
  uint64_t written_ = 0;
};

// Writes tensors already in memory to a new safetensors file, through a
// SafetensorsWriter (used by `preprocess --out`, `ask --dump-logits` and
// tests). Data is copied from the pointers. Throws qvl::Error.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Replaces `path` with `contents` through a temporary file and a rename.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace qvl
