// How the kernels share out their work: OpenMP regions of their own, on
// libgomp, the runtime libtorch uses too, so the kernels, ATen and OpenBLAS
// (bf16 sessions) run on one team of threads whose size at::set_num_threads
// (= omp_set_num_threads) sets. No torch headers: kernels/ lives in qvl_core.
//
// Only files built with -fopenmp (lib/CMakeLists.txt: every kernels/ file)
// open regions; the functions below are how everyone else reaches them.
#pragma once
#include <cstdint>
#include <functional>

namespace qvl::kernels {

// The threads a region started here would have (omp_get_max_threads()): 1
// inside a region already, where the work stays on the calling thread.
int max_threads();

// fn(begin, end) over [0, n) in contiguous pieces, at most one per thread and
// none shorter than `grain` (a small n stays on the calling thread): ATen's
// at::parallel_for split. Rethrows fn's first exception.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// fn(begin, end) over [0, n) in pieces of `chunk` values that the threads
// claim in turn until none is left: on a machine shared with other work, a
// thread that loses its core for a while leaves its share to the others
// instead of holding up the end of the region (a fixed split waits for the
// slowest thread). For pieces of similar cost, each worth far more than an
// atomic add. Rethrows fn's first exception (no piece is started after it).
void parallel_claim(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

// The GEMVs' split of a matrix's rows: one contiguous piece per thread, each
// at least kMinBytesPerThread of weights (waking a thread costs a few
// microseconds) and a multiple of kRowAlignment rows except the last.
constexpr int64_t kMinBytesPerThread = int64_t(64) << 10;
constexpr int64_t kRowAlignment = 8;
void for_row_ranges(int64_t rows, int64_t bytes_per_row, const std::function<void(int64_t, int64_t)>& fn);

// The GEMVs' split: the same share per thread as for_row_ranges, walked in
// order in pieces of about kClaimBytes of weights, so on an idle machine each
// thread still streams one contiguous range; a thread done with its share
// then takes pieces of the others' that are not started yet. Beside other
// busy processes, a thread that lost its core no longer holds up every GEMV
// of a decode step. Rows are computed independently, so results do not
// depend on who computed them. Rethrows fn's first exception (no piece is
// started after it).
constexpr int64_t kClaimBytes = int64_t(256) << 10;
void share_row_ranges(int64_t rows, int64_t bytes_per_row, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace qvl::kernels
