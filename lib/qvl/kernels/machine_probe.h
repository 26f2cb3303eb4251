// Quick measurements of this machine's ceilings, so a benchmark can report its
// figures also as fractions of what the hardware did in the same minutes
// (qvl bench's machine line and efficiency fields). Shared VMs vary run to
// run (2-thread STREAM triad 27-70 GB/s here), so a figure is only comparable
// to the ceiling measured beside it. Each probe takes the best of a few
// passes: the ceiling is what the machine can do, not what a neighbour left.
// The bf16 GEMM probe needs ATen and lives in tensor/gemm_probe.h.
#pragma once
#include <cstdint>
#include <string>

namespace qvl::kernels {

// The first CPU's "model name" in /proc/cpuinfo with its family and model
// numbers ("AMD EPYC (family 25, model 17)"), or its "CPU part" (aarch64);
// "unknown" when there is none.
std::string cpu_model_name();

struct BandwidthProbe {
  double gb_per_s = 0;  // 1e9 bytes per second, best pass
  int64_t bytes = 0;    // buffer size read per pass
  int passes = 0;
};
// Reads a buffer of `bytes` (make it well above the last-level cache) with all
// threads of the OpenMP team, `passes` times; each pass is timed whole. The
// buffer is written once before the first pass (page faults are not timed).
// Throws qvl::Error when it cannot be allocated or the sizes are not positive.
BandwidthProbe measure_read_bandwidth(int64_t bytes = int64_t(256) << 20, int passes = 8);

struct ThroughputProbe {
  double gops_per_s = 0;  // 1e9 multiply-adds x 2 per second, best timed call
  int64_t rows = 0, cols = 0, batch = 0;
  int calls = 0;  // timed calls
};
// qvl's int8 GEMM (gemm_int8, the route of --quant int8 prefill on the
// active tier) on a rows x cols int8 matrix (groups of 128) times `batch`
// float32 input rows, called until min_seconds have passed (at least 3
// calls). Throws qvl::Error on bad sizes.
ThroughputProbe measure_int8_gemm(int64_t rows = 6144, int64_t cols = 2048, int64_t batch = 512,
                                  double min_seconds = 0.4);

}  // namespace qvl::kernels
