#include "qvl/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "qvl/error.h"

namespace qvl {

std::string non_regular_kind(unsigned mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

namespace {

[[noreturn]] void refuse(const std::string& path, unsigned mode) {
  const std::string kind = non_regular_kind(mode);
  throw Error(path + ": not a regular file" + (kind == "not a regular file" ? "" : " (" + kind + ")"));
}

// Pages the kernel reads from disk through a plain mapping come into the page
// cache in small folios, and every later process maps them 4 KB at a time.
// A mapping that asks for huge pages has them read in 2 MB folios instead
// (Linux 6.x on file systems with large folios), mapped with one TLB entry
// each. Weights are used in place from this mapping: on the test VM, a
// checkpoint that qvl itself had read in small folios took 1.2-1.45x as long
// for a warm bf16 prefill, and ~1.1x for vision, as the same folder read with
// this advice (docs/PERFORMANCE.md, "Huge pages for the checkpoint's mapping").
// Pages already cached keep the folios they have. A kernel without
// transparent huge pages refuses the advice, which changes nothing.
void advise_huge_pages(void* data, size_t size) {
#ifdef MADV_HUGEPAGE
  ::madvise(data, size, MADV_HUGEPAGE);
#endif
}

}  // namespace

void require_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(path, st.st_mode);
}

int open_regular_file(const std::string& path) {
  require_regular_file(path);
  // O_NONBLOCK: should the path have become a FIFO since stat(), open() must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(path, st.st_mode);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(path + ": cannot mmap: " + std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    advise_huge_pages(p, size_);
  }
  fd_ = fd;
}

void MappedFile::release() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_), fd_(other.fd_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.fd_ = -1;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    fd_ = other.fd_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.fd_ = -1;
  }
  return *this;
}

void MappedFile::read_into(size_t offset, size_t n, void* dst) const {
  if (offset > size_ || n > size_ - offset)
    throw Error(path_ + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                ") are outside the file's " + std::to_string(size_) + " bytes");
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(path_ + ": read error: " + std::strerror(errno));
    if (got == 0) throw Error(path_ + ": the file ended early (was it replaced or truncated while in use?)");
    out += got;
    offset += size_t(got);
    n -= size_t(got);
  }
}

namespace {
#ifdef MADV_POPULATE_READ
constexpr int kPopulateRead = MADV_POPULATE_READ;
#else
constexpr int kPopulateRead = 22;  // Linux 5.14; older headers lack it
#endif
}  // namespace

int populate_pages(const void* data, size_t nbytes) {
  if (nbytes == 0) return 0;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + nbytes;
  if (::madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateRead) == 0) return 0;
  const int e = errno;
  if (e != EINVAL) return e;
  // An older kernel: readahead only, which never faults.
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
  return 0;
}

double cached_mapping_cpu_seconds(const std::string& path) {
  double seconds = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const MappedFile file(path);
    if (file.size() == 0) return 0;
    timespec start{}, end{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    // The mapping starts on a page: no rounding needed.
    void* data = const_cast<uint8_t*>(file.data());
    if (::madvise(data, file.size(), kPopulateRead) != 0) {
      if (errno == EINVAL) return -1;
      throw Error(path + ": cannot read its pages: " + std::strerror(errno));
    }
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &end);
    seconds = double(end.tv_sec - start.tv_sec) + double(end.tv_nsec - start.tv_nsec) / 1e9;
  }
  return seconds;
}

std::string read_text_file(const std::string& path, int64_t max_bytes) {
  const int fd = open_regular_file(path);
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > max_bytes) {
    ::close(fd);
    throw Error(path + ": file is " + std::to_string(int64_t(st.st_size)) + " bytes, over the limit of " +
                std::to_string(max_bytes) + " bytes");
  }
  std::string text;
  text.reserve(size_t(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(path + ": read error: " + std::strerror(e));
    }
    if (n == 0) break;
    if (int64_t(text.size()) + n > max_bytes) {  // the file grew while we read it
      ::close(fd);
      throw Error(path + ": file is over the limit of " + std::to_string(max_bytes) + " bytes");
    }
    text.append(buffer, size_t(n));
  }
  ::close(fd);
  return text;
}

}  // namespace qvl
