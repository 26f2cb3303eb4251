#include "qvl/vision/prefaulted_allocations.h"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <cstdint>
#include <limits>

namespace qvl {
namespace {

constexpr size_t kLarge = size_t(2) << 20;
// Above every priority libtorch itself sets, so that the swap takes effect
// (and the restore, at the same priority, too).
constexpr uint8_t kPriority = std::numeric_limits<uint8_t>::max();

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it and fault on use, as before
#endif

struct Mapping {
  void* start;
  size_t length;
};

void unmap(void* context) {
  auto* m = static_cast<Mapping*>(context);
  ::munmap(m->start, m->length);
  delete m;
}

class PrefaultedAllocator final : public c10::Allocator {
 public:
  // Where allocations below kLarge go: the allocator the outermost guard replaced.
  void set_small(c10::Allocator* small) { small_ = small; }

  c10::DataPtr allocate(size_t n) const override {
    if (n < kLarge) return small_->allocate(n);
    void* data = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) return small_->allocate(n);
    // A hint: on a kernel without it the pages fault in on use, as before.
    ::madvise(data, n, MADV_POPULATE_WRITE);
    return {data, new Mapping{data, n}, &unmap, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

 private:
  c10::Allocator* small_ = nullptr;
};

}  // namespace

PrefaultedAllocations::PrefaultedAllocations() : previous_(c10::GetCPUAllocator()) {
  // One per process, never freed: blocks it gave out may outlive every guard.
  static PrefaultedAllocator* allocator = new PrefaultedAllocator();
  if (previous_ != allocator) allocator->set_small(previous_);
  c10::SetCPUAllocator(allocator, kPriority);
}

PrefaultedAllocations::~PrefaultedAllocations() { c10::SetCPUAllocator(previous_, kPriority); }

}  // namespace qvl
