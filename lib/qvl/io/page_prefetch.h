// Reads mapped weights into the page tables on background threads, in the
// order they will be used, so that a lazily loaded model's first forward pass
// does not stop on page faults (or on the disk) while the process was busy
// with something else anyway: decoding the image, loading and running the
// vision encoder, tokenizing, restoring a prompt-cache entry. Eager loading
// uses the same threads and waits for them.
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

struct PrefetchOptions {
  // Threads populating at once. Filling page tables costs CPU (~0.07 s per GB
  // of small page-cache pages on a Zen 4 EPYC), not disk bandwidth, so it
  // scales with cores; the threads claim the pieces in order, so together
  // they still advance front to back.
  int threads = 1;
  // Nice value relative to the caller's (Linux nice values are per thread):
  // 0 competes equally with the compute threads; a positive value yields to
  // them and runs only when a core would wait.
  int nice_increment = 0;
};

class PagePrefetcher {
 public:
  // Starts the threads at once; ranges are populated front to back, a few
  // megabytes at a time.
  explicit PagePrefetcher(std::vector<ByteRange> ranges, PrefetchOptions options = {});
  // Stops after the pieces in progress and waits for the threads.
  ~PagePrefetcher();
  PagePrefetcher(const PagePrefetcher&) = delete;
  PagePrefetcher& operator=(const PagePrefetcher&) = delete;

  // Waits until the threads are done (eager loading, tests and measurements).
  void wait();
  // Stops after the pieces in progress and waits for the threads.
  void stop();
  // Bytes populated so far, and 0 or the errno (populate_pages) that stopped the threads.
  size_t bytes_done() const { return done_.load(); }
  int error() const { return error_.load(); }
  int threads() const { return int(threads_.size()); }

 private:
  void run();

  std::vector<ByteRange> pieces_;  // the ranges cut into pieces, in order
  int nice_increment_;
  std::atomic<size_t> next_{0};    // the next piece to claim
  std::atomic<bool> stop_{false};
  std::atomic<size_t> done_{0};
  std::atomic<int> error_{0};
  std::vector<std::thread> threads_;
};

}  // namespace qvl
