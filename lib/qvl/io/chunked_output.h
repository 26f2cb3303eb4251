// Appends bytes to a file in chunks of kChunkBytes that each start at a
// multiple of kChunkBytes (the last one may be shorter).
//
// Why: Linux keeps freshly written data in page-cache folios no larger than
// the write() that made them, and only 2 MB folios at 2 MB-aligned offsets
// are mapped with one page-table entry. A checkpoint or cache written a tensor
// at a time ends up in small folios that cost every process mapping them
// ~0.05-0.08 s of kernel time per GB (qvl's ready and lazy prefill) for as
// long as they stay in the page cache; written in aligned chunks it maps
// almost free, as a file read back from disk does (docs/PERFORMANCE.md,
// "The page cache's state").
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace qvl {

class ChunkedOutput {
 public:
  static constexpr size_t kChunkBytes = size_t(8) << 20;  // a multiple of 2 MB

  // Writes to `fd` (not owned) from its current offset, which must be 0 for
  // the chunks to be aligned. Another chunk size is for tests.
  explicit ChunkedOutput(int fd, size_t chunk_bytes = kChunkBytes);
  ~ChunkedOutput();

  // Both return 0, or the errno of the write that failed (ENOSPC for a write
  // that wrote nothing); the caller reports it with its file's name.
  [[nodiscard]] int append(const void* data, size_t size);
  [[nodiscard]] int flush();  // writes what is buffered; once, at the end

  uint64_t size() const { return flushed_ + used_; }  // bytes appended so far

 private:
  int write_buffer();

  int fd_;
  size_t chunk_bytes_;
  std::unique_ptr<char[]> buffer_;
  size_t used_ = 0;
  uint64_t flushed_ = 0;
};

}  // namespace qvl
