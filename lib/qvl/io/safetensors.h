// Safetensors checkpoints on mmap: one file, or shards named by
// model.safetensors.index.json. Tensors are views into the mapping (no copy).
// Every header is validated before any tensor is handed out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qvl/io/mapped_file.h"

namespace qvl {

enum class DType { BF16, F16, F32, F64, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType t);
const char* dtype_name(DType t);             // the safetensors spelling: "BF16", ...
bool parse_dtype(const std::string& s, DType* out);

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into a MappedFile
  size_t nbytes = 0;
  std::string file;               // which file holds it, for error messages
  const MappedFile* source = nullptr;  // that file (read_bytes)

  int64_t numel() const;
  // Copies bytes [offset, offset + n) of the tensor to dst without touching
  // the mapping (MappedFile::read_into); throws qvl::Error.
  void read_bytes(size_t offset, size_t n, void* dst) const;
  template <class T>
  const T* as() const { return reinterpret_cast<const T*>(data); }
};

// One .safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws qvl::Error
  // Views point at file_: the object stays where it was made.
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(const std::string& name) const;
  const TensorView& get(const std::string& name) const;  // throws if absent
  const MappedFile& mapping() const { return file_; }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A model folder's weights: model.safetensors, or the shards its index lists.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& model_dir);  // throws qvl::Error
  const TensorView* find(const std::string& name) const;
  const TensorView& get(const std::string& name) const;  // throws naming the tensor
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // A short fingerprint of the headers, sizes and modification times of every
  // shard: cheap to compute, changes whenever the weights are replaced.
  std::string fingerprint() const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace qvl
