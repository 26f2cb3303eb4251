#include "qvl/io/page_prefetch.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "qvl/io/mapped_file.h"

namespace qvl {
namespace {

// Small enough that stopping is prompt, large enough that each call is cheap
// next to the work it does (4 MB: ~0.5 ms from the page cache).
constexpr size_t kPiece = size_t(4) << 20;
// The thread's nice value relative to the process: it yields to the compute
// threads it overlaps but still runs whenever a core waits (an I/O stall, a
// single-threaded load step).
constexpr int kNiceIncrement = 10;

}  // namespace

PagePrefetcher::PagePrefetcher(std::vector<ByteRange> ranges) : ranges_(std::move(ranges)) {
  thread_ = std::thread([this] { run(); });
}

PagePrefetcher::~PagePrefetcher() { stop(); }

void PagePrefetcher::stop() {
  stop_ = true;
  wait();
}

void PagePrefetcher::wait() {
  if (thread_.joinable()) thread_.join();
}

void PagePrefetcher::run() {
  // Linux nice values are per thread: this lowers only the prefetch thread.
  const int tid = int(::syscall(SYS_gettid));
  const int nice = ::getpriority(PRIO_PROCESS, id_t(tid));
  ::setpriority(PRIO_PROCESS, id_t(tid), std::min(nice + kNiceIncrement, 19));  // advisory
  for (const ByteRange& r : ranges_) {
    const uint8_t* p = static_cast<const uint8_t*>(r.data);
    for (size_t off = 0; off < r.nbytes; off += kPiece) {
      if (stop_) return;
      const size_t n = std::min(kPiece, r.nbytes - off);
      const int e = populate_pages(p + off, n);
      if (e != 0) {
        error_ = e;
        return;
      }
      done_ += n;
    }
  }
}

}  // namespace qvl
