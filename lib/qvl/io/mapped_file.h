// A read-only memory mapping of a whole file. Weights are used in place from
// the mapping, so a checkpoint costs page cache, not heap. The mapping asks for
// huge pages, so that what it reads from disk is cached in 2 MB folios
// (mapped_file.cpp says why); read_into copies bytes without mapping them,
// for the small pieces beside big ones that a run does not read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace qvl {

// A file truncated while it is mapped makes a read of its lost pages raise
// SIGBUS. qvl then prints "PATH: the WHAT changed while it was being read"
// (`what`: a string literal such as "checkpoint") and exits 1, instead of
// dying without a word; a SIGBUS elsewhere keeps its usual action.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path, const char* what = "file");  // throws qvl::Error
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Copies bytes [offset, offset + n) of the mapped file to dst with pread,
  // not through the mapping: touching a few bytes there maps the whole
  // page-cache folio around them (up to 2 MB) into this process. Throws
  // qvl::Error if the range is outside the mapping or the file ends early.
  void read_into(size_t offset, size_t n, void* dst) const;

 private:
  void release();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // the mapped file itself, for read_into
  int watch_slot_ = -1;  // its entry among the mappings the SIGBUS handler knows, or -1
};

// Maps the pages of [data, data + nbytes) (inside a read-only file mapping)
// into the page tables now, reading them from disk first if need be, so later
// reads do not fault. Returns 0 on success, else the errno: EFAULT where a
// read would raise SIGBUS (the file was truncated after it was mapped), so a
// caller learns of it without a signal. On kernels without
// MADV_POPULATE_READ (before 5.14) it only starts readahead and returns 0.
int populate_pages(const void* data, size_t nbytes);

// The CPU seconds of filling the page tables of a fresh mapping of `path` (as
// a MappedFile) once the file is in the page cache: mapped and populated once
// untimed, which reads from disk whatever is not cached, then again, timed on
// this thread. How the page cache holds the file decides it: ~0.002 s per GB
// in 2 MB folios, 0.04-0.08 s in small ones (docs/PERFORMANCE.md, "The page
// cache's state"). Negative when the kernel lacks MADV_POPULATE_READ (before
// 5.14); throws qvl::Error when the file cannot be mapped or read.
double cached_mapping_cpu_seconds(const std::string& path);

// Every file qvl reads goes through these two, so that a FIFO, a socket or a
// device is refused before anything opens it for reading (opening a FIFO
// blocks until a writer comes; /dev/zero never ends).

// "a FIFO", "a socket", "a character device", "a block device", "a directory",
// "not a regular file" for anything else; "" for a regular file.
std::string non_regular_kind(unsigned mode);

// Throws qvl::Error "PATH: not a regular file (a FIFO)" unless PATH (symbolic
// links followed) is a regular file; a missing file throws "cannot open".
void require_regular_file(const std::string& path);

// A descriptor open for reading on a regular file, or qvl::Error. The type is
// checked with stat() first and again with fstat() on a non-blocking open, so
// a file swapped for a FIFO in between cannot block either. The caller closes it.
int open_regular_file(const std::string& path);

// Reads a whole (small) regular file into a string; throws qvl::Error naming
// the path, also when the file is larger than max_bytes.
constexpr int64_t kMaxTextFileBytes = int64_t(1) << 30;
std::string read_text_file(const std::string& path, int64_t max_bytes = kMaxTextFileBytes);

}  // namespace qvl
