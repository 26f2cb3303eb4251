#include "qvl/session/threads.h"

#include <ATen/Parallel.h>

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace qvl {
namespace {

// In a bf16 session OpenBLAS runs the small float32 attention matmuls of a
// prefill and, below the avx512 tier, the widened bf16 matmuls
// (tensor/linear.h), which split their work over the OpenMP threads
// themselves. OpenBLAS's own threads would spin (sched_yield) beside those
// OpenMP threads: one OpenBLAS thread made a 512-token prefill 1.4x faster
// here. Looked up at run time: the system BLAS may not be OpenBLAS.
void use_one_openblas_thread() {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1u, std::thread::hardware_concurrency());
}

void configure_threads(int threads, ComputeDtype dtype) {
  // libtorch's default is its guess at physical cores, which is 1 on some
  // VMs with 2 real cores; use every core this process may run on instead.
  at::set_num_threads(threads > 0 ? threads : usable_cores());
  if (dtype == ComputeDtype::BF16) use_one_openblas_thread();
}

}  // namespace qvl
