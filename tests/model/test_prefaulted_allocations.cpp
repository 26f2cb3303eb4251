// vision/prefaulted_allocations.h: inside the guard large tensors arrive with
// their pages present, small ones come from libtorch's own allocator, and
// every block stays usable after the guard has put libtorch's allocator back.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "qvl/vision/prefaulted_allocations.h"

using namespace qvl;

namespace {

// Pages of the tensor's memory the kernel has mapped, untouched by this check.
int64_t resident_pages(const at::Tensor& t) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data_ptr()) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(t.data_ptr()) + t.nbytes();
  std::vector<unsigned char> in_core((end - begin + page - 1) / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()) == 0);
  int64_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n;
}

// Whether this kernel fills pages on MADV_POPULATE_WRITE (Linux 5.14+; QEMU's
// user mode accepts the call and does nothing): the allocator only hints.
bool kernel_populates() {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;
#endif
  const size_t length = size_t(16) * size_t(::sysconf(_SC_PAGESIZE));
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  std::vector<unsigned char> in_core(16);
  const bool populated = ::madvise(p, length, MADV_POPULATE_WRITE) == 0 &&
                         ::mincore(p, length, in_core.data()) == 0 && (in_core[0] & in_core[15] & 1);
  ::munmap(p, length);
  return populated;
}

}  // namespace

TEST_CASE("prefaulted allocations: large blocks arrive populated and outlive the guard, small ones are libtorch's") {
  c10::Allocator* const libtorch = c10::GetCPUAllocator();
  const int64_t large = int64_t(8) << 20;
  const at::Tensor small_before = at::empty({100}, at::kByte);
  at::Tensor large_inside, small_inside;
  {
    PrefaultedAllocations guard;
    CHECK(c10::GetCPUAllocator() != libtorch);
    {
      PrefaultedAllocations nested;
    }
    CHECK(c10::GetCPUAllocator() != libtorch);  // the inner guard restored the outer one's
    large_inside = at::empty({large}, at::kByte);
    small_inside = at::empty({100}, at::kByte);
  }
  CHECK(c10::GetCPUAllocator() == libtorch);
  // Every page is there before anything wrote to it.
  const int64_t pages = (large + ::sysconf(_SC_PAGESIZE) - 1) / ::sysconf(_SC_PAGESIZE);
  if (kernel_populates())
    CHECK(resident_pages(large_inside) >= pages);
  else
    MESSAGE("this kernel does not populate on MADV_POPULATE_WRITE: residency not checked");
  CHECK((small_inside.storage().data_ptr().get_deleter() == small_before.storage().data_ptr().get_deleter()));
  // Usable after the guard is gone, and freed by its own deleter (ASan checks both).
  large_inside.fill_(7);
  CHECK(large_inside.sum().item<int64_t>() == 7 * large);
  large_inside = at::Tensor();
  // A large tensor allocated now comes from libtorch again.
  const at::Tensor large_after = at::empty({large}, at::kByte);
  CHECK((large_after.storage().data_ptr().get_deleter() == small_before.storage().data_ptr().get_deleter()));
}
