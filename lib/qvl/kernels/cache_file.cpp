#include "qvl/kernels/cache_file.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "qvl/error.h"

namespace qvl::kernels::cache_file {

Writer::Writer(const std::string& path)
    : path_(path), temporary_(path + ".tmp"), file_(std::fopen(temporary_.c_str(), "wb"), &std::fclose) {
  if (!file_) throw Error(fmt::format("cannot create {}: {}", temporary_, std::strerror(errno)));
}

Writer::~Writer() {
  if (committed_) return;
  file_.reset();
  std::remove(temporary_.c_str());
}

void Writer::bytes(const void* data, size_t size) {
  if (size > 0 && std::fwrite(data, 1, size, file_.get()) != size)
    throw Error(fmt::format("cannot write {}: {}", temporary_, std::strerror(errno)));
  written_ += size;
}

void Writer::pad_to(uint64_t offset) {
  static const char zeros[kAlignment] = {};
  while (written_ < offset) bytes(zeros, std::min<uint64_t>(offset - written_, kAlignment));
}

void Writer::commit() {
  if (std::fclose(file_.release()) != 0)
    throw Error(fmt::format("cannot write {}: {}", temporary_, std::strerror(errno)));
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0)
    throw Error(fmt::format("cannot rename {} to {}: {}", temporary_, path_, std::strerror(errno)));
  committed_ = true;
}

void Reader::bytes(void* out, size_t size) {
  if (size > file_.size() - offset_)
    throw Error(fmt::format("{}: {} header is truncated at byte {}", file_.path(), kind_, offset_));
  std::memcpy(out, file_.data() + offset_, size);
  offset_ += size;
}

std::string Reader::string(uint64_t length) {
  if (length > file_.size() - offset_)
    throw Error(fmt::format("{}: {} header is truncated at byte {}", file_.path(), kind_, offset_));
  std::string s(reinterpret_cast<const char*>(file_.data() + offset_), length);
  offset_ += length;
  return s;
}

}  // namespace qvl::kernels::cache_file
