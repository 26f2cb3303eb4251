// Process-wide thread set-up. A front end calls configure_threads() once,
// before it loads a model: the library itself never changes process-wide
// settings behind the caller's back. (Tests and tools that skip it run with
// libtorch's defaults.)
#pragma once
#include "qvl/model/precision.h"

namespace qvl {

// CPUs this process may run on (its affinity mask): the default thread count.
int usable_cores();

// Sets the worker threads of libtorch, OpenMP and qvl's kernels to `threads`
// (0: usable_cores()) and, for a bf16 run, OpenBLAS to one thread of its own.
void configure_threads(int threads, ComputeDtype dtype);

}  // namespace qvl
