// While a PrefaultedAllocations lives, libtorch's CPU allocations of 2 MB and
// more get memory whose pages are already there: an anonymous mapping of
// their own, populated in one call (MADV_POPULATE_WRITE) before it is used.
//
// Why: torch::jit::load copies each tensor of a module file into fresh memory
// with read(), and faulting that memory in 4 KB at a time inside the copy
// costs as much as the copy. Populating it first took the 2B vision module's
// load from 0.66 to 0.50 s (median of 6, docs/PERFORMANCE.md, "Loading the
// vision module"). Transparent huge pages for the same memory were slower
// and erratic on the VMs measured (0.24-2.0 s of kernel time), so they are
// not asked for. Only the load is wrapped: activations, freed and allocated
// again on every call, are better served by libtorch's own allocator, which
// reuses memory.
//
// The guard swaps libtorch's process-wide CPU allocator; memory handed out
// meanwhile stays valid after the guard is gone (each block frees itself).
// Guards nest; two threads' guards whose lifetimes overlap without nesting
// could leave it swapped (harmless: large allocations would stay populated).
#pragma once

namespace c10 {
struct Allocator;
}

namespace qvl {

class PrefaultedAllocations {
 public:
  PrefaultedAllocations();
  ~PrefaultedAllocations();
  PrefaultedAllocations(const PrefaultedAllocations&) = delete;
  PrefaultedAllocations& operator=(const PrefaultedAllocations&) = delete;

 private:
  c10::Allocator* previous_;
};

}  // namespace qvl
