#include "qvl/kernels/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

namespace qvl::kernels {
namespace {

int64_t divide_up(int64_t n, int64_t d) { return (n + d - 1) / d; }

// fn(begin, end) on each thread's piece of [0, n): `pieces(threads)` pieces
// of `piece_length(pieces)` values. No num_threads clause, as ATen does
// (GOMP re-creates its team whenever the count changes).
template <class Pieces, class Length>
void run_pieces(int64_t n, Pieces pieces_for, Length piece_length,
                const std::function<void(int64_t, int64_t)>& fn) {
  std::exception_ptr error;
#pragma omp parallel
  {
    const int64_t pieces = pieces_for(int64_t(omp_get_num_threads()));
    const int64_t length = piece_length(pieces);
    const int64_t begin = omp_get_thread_num() * length;
    const int64_t end = std::min(n, begin + length);
    if (omp_get_thread_num() < pieces && begin < end) {
      try {
        fn(begin, end);
      } catch (...) {
#pragma omp critical(qvl_kernels_run_pieces)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

int max_threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain || n == 1 || max_threads() <= 1) return fn(0, n);
  run_pieces(
      n, [&](int64_t threads) { return std::min(threads, divide_up(n, grain)); },
      [&](int64_t pieces) { return divide_up(n, pieces); }, fn);
}

void parallel_claim(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  if (n <= chunk || max_threads() <= 1) return fn(0, n);
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
#pragma omp parallel
  {
    for (int64_t begin = next.fetch_add(chunk); begin < n; begin = next.fetch_add(chunk)) {
      try {
        fn(begin, std::min(n, begin + chunk));
      } catch (...) {
#pragma omp critical(qvl_kernels_run_pieces)
        if (!error) error = std::current_exception();
        next.store(n);
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

namespace {

// How both row splitters below cut a matrix: at most this many shares (each
// at least kMinBytesPerThread of weights), ...
int64_t max_row_shares(int64_t rows, int64_t row_bytes) {
  return divide_up(rows, std::max<int64_t>(1, kMinBytesPerThread / row_bytes));
}
// ... each this many rows long (a multiple of kRowAlignment, but the last).
int64_t row_share(int64_t rows, int64_t shares) {
  return divide_up(divide_up(rows, shares), kRowAlignment) * kRowAlignment;
}

}  // namespace

void for_row_ranges(int64_t rows, int64_t bytes_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t max_shares = max_row_shares(rows, std::max<int64_t>(1, bytes_per_row));
  if (max_shares <= 1 || max_threads() <= 1) return fn(0, rows);
  run_pieces(
      rows, [&](int64_t threads) { return std::min(threads, max_shares); },
      [&](int64_t shares) { return row_share(rows, shares); }, fn);
}

void share_row_ranges(int64_t rows, int64_t bytes_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t row_bytes = std::max<int64_t>(1, bytes_per_row);
  const int64_t threads = std::min<int64_t>(max_threads(), max_row_shares(rows, row_bytes));
  if (threads <= 1) return fn(0, rows);
  const int64_t share = row_share(rows, threads);
  const int64_t piece = std::max<int64_t>(1, divide_up(kClaimBytes / row_bytes, kRowAlignment)) * kRowAlignment;
  // next[t]: the first row of thread t's share nobody has taken yet.
  const std::unique_ptr<std::atomic<int64_t>[]> next(new std::atomic<int64_t>[size_t(threads)]);
  for (int64_t t = 0; t < threads; ++t) next[size_t(t)] = std::min(rows, t * share);
  const auto share_end = [&](int64_t t) { return std::min(rows, (t + 1) * share); };
  std::exception_ptr error;
#pragma omp parallel
  {
    // A team larger than `threads` (another caller's setting) only helps out.
    const int64_t me = omp_get_thread_num();
    for (int64_t i = 0; i < threads; ++i) {
      const int64_t owner = (me + i) % threads, end = share_end(owner);
      for (int64_t begin = next[size_t(owner)].fetch_add(piece); begin < end;
           begin = next[size_t(owner)].fetch_add(piece)) {
        try {
          fn(begin, std::min(end, begin + piece));
        } catch (...) {
#pragma omp critical(qvl_kernels_run_pieces)
          if (!error) error = std::current_exception();
          for (int64_t t = 0; t < threads; ++t) next[size_t(t)].store(rows);
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace qvl::kernels
