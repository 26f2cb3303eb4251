// kernels/parallel.h's parallel_claim: every value of [0, n) handed out
// exactly once, in pieces of the asked size, on any thread count, and fn's
// exception back on the caller.
#include <doctest/doctest.h>

#include <omp.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "kernel_test_support.h"
#include "qvl/kernels/parallel.h"

using namespace qvl::kernels;
using qvl::test::ThreadCount;

TEST_CASE("parallel_claim covers [0, n) once, in pieces of the chunk, on 1 to 3 threads") {
  for (int threads : {1, 2, 3})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(64), int64_t(1001)})
      for (int64_t chunk : {int64_t(1), int64_t(3), int64_t(64), int64_t(5000)}) {
        CAPTURE(threads);
        CAPTURE(n);
        CAPTURE(chunk);
        ThreadCount t(threads);
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<bool> pieces_ok{true};
        std::vector<std::atomic<int>> by_thread(4);
        parallel_claim(n, chunk, [&](int64_t begin, int64_t end) {
          // A piece starts at a multiple of the chunk and is whole, except the last.
          if (begin % chunk != 0 || (end - begin != chunk && end != n) || begin >= end) pieces_ok = false;
          for (int64_t i = begin; i < end; ++i) seen[size_t(i)]++;
          by_thread[size_t(omp_get_thread_num() % 4)]++;
        });
        bool once = true;
        for (auto& s : seen) once &= s.load() == 1;
        CHECK(once);
        CHECK(pieces_ok);
        if (n <= chunk || threads == 1) CHECK(by_thread[0] == 1);  // small or single-threaded: one call, no team
      }
}

TEST_CASE("parallel_claim: a thread left behind does not hold the others' pieces") {
  // Thread 0 stalls in its first piece; the other claims the rest meanwhile.
  ThreadCount t(2);
  if (omp_get_max_threads() < 2) return;
  std::vector<int> owner(40, -1);
  parallel_claim(40, 1, [&](int64_t begin, int64_t) {
    if (omp_get_thread_num() == 0 && begin < 2) {
      const double until = omp_get_wtime() + 0.2;
      while (omp_get_wtime() < until) {
      }
    }
    owner[size_t(begin)] = omp_get_thread_num();
  });
  int by_other = 0;
  for (int o : owner) by_other += o == 1;
  CHECK(by_other >= 35);  // a fixed half-and-half split would give it 20
}

TEST_CASE("parallel_claim rethrows the first exception, on any thread count") {
  for (int threads : {1, 2}) {
    ThreadCount t(threads);
    std::atomic<int64_t> calls{0};
    CHECK_THROWS_AS(parallel_claim(100, 1,
                                   [&](int64_t begin, int64_t end) {
                                     ++calls;
                                     if (begin <= 3 && 3 < end) throw std::runtime_error("value 3");
                                     // Slow pieces: the other thread must not finish them all
                                     // while the throw unwinds (slow under ASan).
                                     std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                   }),
                    std::runtime_error);
    CHECK(calls.load() < 100);  // pieces stop being handed out after the throw
  }
}

TEST_CASE("share_row_ranges covers every row once, each thread first walking its own share in order") {
  for (int threads : {1, 2, 3})
    for (int64_t rows : {int64_t(1), int64_t(13), int64_t(1000), int64_t(4099)})
      for (int64_t row_bytes : {int64_t(64), int64_t(4096), int64_t(1) << 20}) {
        CAPTURE(threads);
        CAPTURE(rows);
        CAPTURE(row_bytes);
        ThreadCount t(threads);
        std::vector<std::atomic<int>> seen(static_cast<size_t>(rows));
        std::atomic<bool> aligned{true};
        // Per thread: where its previous piece ended, and how often a piece
        // started before that (it moved on to another thread's share).
        std::vector<int64_t> last_end(8, -1), jumps_back(8, 0);
        share_row_ranges(rows, row_bytes, [&](int64_t begin, int64_t end) {
          if (begin >= end || (begin % kRowAlignment != 0)) aligned = false;
          for (int64_t i = begin; i < end; ++i) seen[size_t(i)]++;
          const size_t me = size_t(omp_get_thread_num() % 8);
          if (last_end[me] >= 0 && begin < last_end[me]) ++jumps_back[me];
          last_end[me] = end;
        });
        bool once = true;
        for (auto& s : seen) once &= s.load() == 1;
        CHECK(once);
        CHECK(aligned);
        // Each share is walked in order: a thread goes back at most once per
        // other share it helps with (pieces claimed at random would go back
        // about every other piece).
        for (int64_t j : jumps_back) CHECK(j <= threads - 1);
      }
}

TEST_CASE("share_row_ranges: a thread left behind does not hold up its share") {
  // Thread 0 stalls in its first piece (as if descheduled) until the other
  // has done every other row; the other finishes its own share, then takes
  // what is left of thread 0's. With a fixed split the other never does, and
  // thread 0 gives up after 10 s with half the rows. (Sleeping, not spinning:
  // on a loaded machine the other thread may need this core.)
  ThreadCount t(2);
  if (omp_get_max_threads() < 2) return;
  const int64_t rows = 4096, row_bytes = kClaimBytes / 8;  // pieces of 8 rows
  std::vector<int> owner(size_t(rows), -1);
  std::atomic<int64_t> done_by_other{0};
  bool thread0_stalled = false;  // only thread 0 reads or writes it
  share_row_ranges(rows, row_bytes, [&](int64_t begin, int64_t end) {
    // Whichever piece thread 0 gets first: when it starts late (a loaded
    // machine, a sanitizer build) the other may already have taken row 0.
    if (omp_get_thread_num() == 0 && !thread0_stalled) {
      thread0_stalled = true;
      const double until = omp_get_wtime() + 10;
      while (done_by_other.load() < rows - (end - begin) && omp_get_wtime() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (int64_t i = begin; i < end; ++i) owner[size_t(i)] = omp_get_thread_num();
    if (omp_get_thread_num() == 1) done_by_other += end - begin;
  });
  int64_t by_other = 0;
  for (int o : owner) by_other += o == 1;
  CHECK(by_other >= rows - 64);
}

TEST_CASE("share_row_ranges rethrows the first exception and stops handing out pieces") {
  for (int threads : {1, 2}) {
    ThreadCount t(threads);
    std::atomic<int64_t> calls{0};
    CHECK_THROWS_AS(share_row_ranges(4096, kClaimBytes / 8,
                                     [&](int64_t begin, int64_t end) {
                                       ++calls;
                                       if (begin <= 3 && 3 < end) throw std::runtime_error("row 3");
                                       std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                     }),
                    std::runtime_error);
    if (threads > 1) CHECK(calls.load() < 4096 / 8);  // 512 pieces
  }
}
