// A read-only memory mapping of a whole file. Weights are used in place from
// the mapping, so a checkpoint costs page cache, not heap.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace qvl {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws qvl::Error
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string; throws qvl::Error naming the path.
std::string read_text_file(const std::string& path);

}  // namespace qvl
