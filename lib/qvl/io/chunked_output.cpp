#include "qvl/io/chunked_output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace qvl {

ChunkedOutput::ChunkedOutput(int fd, size_t chunk_bytes) : fd_(fd), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)) {}
ChunkedOutput::~ChunkedOutput() = default;

int ChunkedOutput::write_buffer() {
  const char* p = buffer_.get();
  size_t left = used_;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : ENOSPC;
    p += n;
    left -= size_t(n);
  }
  flushed_ += used_;
  used_ = 0;
  return 0;
}

int ChunkedOutput::append(const void* data, size_t size) {
  // Allocated at the first byte, and not zeroed (make_unique<char[]> would
  // touch all 8 MB): a small file costs only the pages it fills.
  if (!buffer_) buffer_.reset(new char[chunk_bytes_]);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t n = std::min(size, chunk_bytes_ - used_);
    std::memcpy(buffer_.get() + used_, p, n);
    used_ += n;
    p += n;
    size -= n;
    if (used_ == chunk_bytes_)
      if (const int err = write_buffer()) return err;
  }
  return 0;
}

int ChunkedOutput::flush() { return used_ > 0 ? write_buffer() : 0; }

}  // namespace qvl
