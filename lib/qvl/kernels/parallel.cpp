#include "qvl/kernels/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>

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

void for_row_ranges(int64_t rows, int64_t bytes_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t min_rows = std::max<int64_t>(1, kMinBytesPerThread / std::max<int64_t>(1, bytes_per_row));
  const int64_t max_pieces = divide_up(rows, min_rows);
  if (max_pieces <= 1 || max_threads() <= 1) return fn(0, rows);
  run_pieces(
      rows, [&](int64_t threads) { return std::min(threads, max_pieces); },
      [&](int64_t pieces) { return divide_up(divide_up(rows, pieces), kRowAlignment) * kRowAlignment; }, fn);
}

}  // namespace qvl::kernels
