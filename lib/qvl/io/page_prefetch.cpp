#include "qvl/io/page_prefetch.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "qvl/io/mapped_file.h"

namespace qvl {
namespace {

// Small enough that stopping is prompt and that two threads share the work
// evenly, large enough that each call is cheap next to the work it does
// (4 MB: ~0.3 ms from the page cache).
constexpr size_t kPiece = size_t(4) << 20;

std::vector<ByteRange> cut_into_pieces(const std::vector<ByteRange>& ranges) {
  std::vector<ByteRange> pieces;
  for (const ByteRange& r : ranges) {
    const uint8_t* p = static_cast<const uint8_t*>(r.data);
    for (size_t off = 0; off < r.nbytes; off += kPiece) pieces.push_back({p + off, std::min(kPiece, r.nbytes - off)});
  }
  return pieces;
}

}  // namespace

PagePrefetcher::PagePrefetcher(std::vector<ByteRange> ranges, PrefetchOptions options)
    : pieces_(cut_into_pieces(ranges)), nice_increment_(options.nice_increment) {
  const size_t n = std::min(size_t(std::max(options.threads, 1)), std::max<size_t>(pieces_.size(), 1));
  for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
}

PagePrefetcher::~PagePrefetcher() { stop(); }

void PagePrefetcher::stop() {
  stop_ = true;
  wait();
}

void PagePrefetcher::wait() {
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
}

void PagePrefetcher::run() {
  if (nice_increment_ > 0) {
    // Linux nice values are per thread: this lowers only this thread.
    const int tid = int(::syscall(SYS_gettid));
    const int nice = ::getpriority(PRIO_PROCESS, id_t(tid));
    ::setpriority(PRIO_PROCESS, id_t(tid), std::min(nice + nice_increment_, 19));  // advisory
  }
  while (!stop_) {
    const size_t i = next_.fetch_add(1);
    if (i >= pieces_.size()) return;
    const int e = populate_pages(pieces_[i].data, pieces_[i].nbytes);
    if (e != 0) {
      int none = 0;
      error_.compare_exchange_strong(none, e);
      stop_ = true;  // the other threads stop too: the file is not what was mapped
      return;
    }
    done_ += pieces_[i].nbytes;
  }
}

}  // namespace qvl
