// Reads mapped weights into the page tables on a background thread, in the
// order they will be used, so that a lazily loaded model's first forward pass
// does not stop on page faults (or on the disk) while the process was busy
// with something else anyway: decoding the image, loading and running the
// vision encoder, tokenizing.
//
// Nothing is copied: the pages are the file's page-cache pages, mapped shared
// and evictable (RSS counts them as file-backed, as eager loading does). A
// range that cannot be read (the file shrank after it was mapped) stops the
// prefetch quietly instead of raising SIGBUS; whoever reads it later gets what
// they would have got without the prefetch.
#pragma once
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

namespace qvl {

struct ByteRange {
  const void* data;
  size_t nbytes;
};

class PagePrefetcher {
 public:
  // Starts the thread at once; ranges are populated front to back, a few
  // megabytes at a time, the thread at a lower CPU priority than the caller
  // so that the work it overlaps is not slowed.
  explicit PagePrefetcher(std::vector<ByteRange> ranges);
  // Stops after the piece in progress and waits for the thread.
  ~PagePrefetcher();
  PagePrefetcher(const PagePrefetcher&) = delete;
  PagePrefetcher& operator=(const PagePrefetcher&) = delete;

  // Waits until the thread is done (for tests and measurements).
  void wait();
  // Stops after the piece in progress and waits for the thread.
  void stop();
  // Bytes populated so far, and 0 or the errno (populate_pages) that stopped the thread.
  size_t bytes_done() const { return done_.load(); }
  int error() const { return error_.load(); }

 private:
  void run();

  std::vector<ByteRange> ranges_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> done_{0};
  std::atomic<int> error_{0};
  std::thread thread_;
};

}  // namespace qvl
