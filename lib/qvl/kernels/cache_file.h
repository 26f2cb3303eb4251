// Internal to lib/qvl/kernels: what the quantized-weight cache files (int8_cache,
// int4_cache) share: a writer that goes through "<path>.tmp" and renames, so a
// crash never leaves a torn file, and a header reader that never runs past
// the end of the mapping. Both throw qvl::Error naming the file.
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "qvl/io/mapped_file.h"

namespace qvl::kernels::cache_file {

constexpr uint64_t kAlignment = 64;  // every data block starts on a cache line
inline uint64_t align_up(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

class Writer {
 public:
  explicit Writer(const std::string& path);  // creates path + ".tmp"
  ~Writer();                                 // removes the temporary unless commit() ran
  void bytes(const void* data, size_t size);
  template <class T>
  void value(const T& v) { bytes(&v, sizeof v); }
  void pad_to(uint64_t offset);  // zeros up to `offset`
  uint64_t written() const { return written_; }
  void commit();  // closes the temporary and renames it to the path

 private:
  std::string path_, temporary_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Reads header fields in order; `kind` names the file in errors ("int8 cache").
class Reader {
 public:
  Reader(const MappedFile& file, const char* kind) : file_(file), kind_(kind) {}
  void bytes(void* out, size_t size);
  template <class T>
  T value() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  std::string string(uint64_t length);
  // Whether [offset, offset + size) lies in the file and offset is aligned.
  bool fits(uint64_t offset, uint64_t size) const {
    return offset % kAlignment == 0 && offset <= file_.size() && size <= file_.size() - offset;
  }

 private:
  const MappedFile& file_;
  const char* kind_;
  size_t offset_ = 0;
};

}  // namespace qvl::kernels::cache_file
