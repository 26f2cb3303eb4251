#include "qvl/io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
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

// ---------------------------------------------------------------- SIGBUS on a file that shrank
// The handler runs on the thread whose read faulted, at any moment, so it
// touches only these fixed slots (atomics and a copy of the path) and calls
// only write(2), _exit and sigaction, which are async-signal-safe.
struct WatchedMapping {
  std::atomic<int> state{0};  // kFree, kChanging, kWatched
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[1024];
  const char* what = "file";
};
constexpr int kFree = 0, kChanging = 1, kWatched = 2;
constexpr int kWatchedMappings = 256;  // more mappings at once go unwatched (a plain SIGBUS)
WatchedMapping g_watched[kWatchedMappings];
struct sigaction g_previous_sigbus;

void write_all(const char* text, size_t n) {
  while (n > 0) {
    const ssize_t done = ::write(STDERR_FILENO, text, n);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) return;
    text += done;
    n -= size_t(done);
  }
}

std::atomic<bool> g_reporting{false};

// Appends text to line[used..] within capacity; returns the new length.
size_t append(char* line, size_t used, size_t capacity, const char* text) {
  const size_t n = std::min(std::strlen(text), capacity - used);
  std::memcpy(line + used, text, n);
  return used + n;
}

// Several threads reading the mapping can fault at once: the first one says
// it, in one write so the line stays whole, and ends the process; the others
// wait for that.
[[noreturn]] void report_changed_file(const WatchedMapping& mapping) {
  if (g_reporting.exchange(true)) {
    for (;;) ::pause();
  }
  char line[sizeof mapping.path + 64];
  size_t used = append(line, 0, sizeof line, mapping.path);
  used = append(line, used, sizeof line, ": the ");
  used = append(line, used, sizeof line, mapping.what);
  used = append(line, used, sizeof line, " changed while it was being read\n");
  write_all(line, used);
  ::_exit(1);
}

void on_sigbus(int, siginfo_t* info, void*) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // raised by a fault, not sent by kill
    for (const WatchedMapping& mapping : g_watched) {
      if (mapping.state.load(std::memory_order_acquire) != kWatched) continue;
      if (address >= mapping.begin.load(std::memory_order_relaxed) &&
          address < mapping.end.load(std::memory_order_relaxed))
        report_changed_file(mapping);
    }
  }
  // Not ours: the action from before. A fault happens again on return and
  // gets it; a SIGBUS sent by kill is raised again (delivered on return).
  ::sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  if (info->si_code <= 0) ::raise(SIGBUS);
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

// The slot now watching [data, data + size), or -1 when all are taken.
int watch_mapping(const void* data, size_t size, const std::string& path, const char* what) {
  install_sigbus_handler();
  for (int i = 0; i < kWatchedMappings; ++i) {
    WatchedMapping& slot = g_watched[i];
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kChanging, std::memory_order_acquire)) continue;
    std::snprintf(slot.path, sizeof slot.path, "%s", path.c_str());
    slot.what = what;
    slot.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_relaxed);
    slot.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_relaxed);
    slot.state.store(kWatched, std::memory_order_release);
    return i;
  }
  return -1;
}

void unwatch_mapping(int index) {
  if (index < 0) return;
  WatchedMapping& slot = g_watched[index];
  slot.state.store(kChanging, std::memory_order_release);
  slot.begin.store(0, std::memory_order_relaxed);
  slot.end.store(0, std::memory_order_relaxed);
  slot.state.store(kFree, std::memory_order_release);
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

MappedFile::MappedFile(const std::string& path, const char* what) : path_(path) {
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
    watch_slot_ = watch_mapping(p, size_, path, what);
  }
  fd_ = fd;
}

void MappedFile::release() {
  unwatch_mapping(watch_slot_);  // before the range can be mapped again for something else
  watch_slot_ = -1;
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_), fd_(other.fd_),
      watch_slot_(other.watch_slot_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.fd_ = -1;
  other.watch_slot_ = -1;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    fd_ = other.fd_;
    watch_slot_ = other.watch_slot_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.fd_ = -1;
    other.watch_slot_ = -1;
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
