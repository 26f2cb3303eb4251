// What mapping a file that is already in the page cache costs this process
// (io/mapped_file.h, cached_mapping_cpu_seconds): ~0.002 s per GB for a file
// in 2 MB folios, 0.04-0.08 s for one in small folios (docs/PERFORMANCE.md,
// "The page cache's state"). `qvl bench` reports the same for the checkpoint.
//
// Then what the first read of each page costs once it is mapped: one byte of
// every 4 KiB page, timed twice. With hardware-assisted paging both passes
// should cost about a cache miss per page (not measured: no such machine
// here). On the PVM guest of docs/PERFORMANCE.md ("First access to a page")
// the first pass cost 0.07-0.38 CPU s per GB and the second ~0.01: a cost no
// page fault in the guest shows, which every new process pays again for the
// weights it reads.
//
// Last, what fresh anonymous memory costs at its first write, in small pages
// and with huge-page advice: every buffer a run allocates pays it. On that
// PVM guest ~15-22 us per 4 KiB page in small pages, 0.4-10 with the advice;
// a page fault and a 4 KiB clear should be well under that elsewhere.
//
//   qvl_map_cost FILE...
#include <sys/mman.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"

namespace {

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

// CPU seconds to read one byte of every 4 KiB page of the mapping.
double touch_seconds(const qvl::MappedFile& file) {
  const double start = thread_cpu_seconds();
  uint8_t sum = 0;
  for (size_t off = 0; off < file.size(); off += 4096)
    sum ^= *reinterpret_cast<const volatile uint8_t*>(file.data() + off);
  const double seconds = thread_cpu_seconds() - start;
  if (sum == 0x5a) std::fflush(stdout);  // keeps the reads
  return seconds;
}

// Wall microseconds per 4 KiB page for the first memset of 64 MiB of fresh
// anonymous memory (2 MiB-aligned), with or without MADV_HUGEPAGE.
double first_write_us_per_page(bool huge_page_advice) {
  constexpr size_t kBytes = size_t(64) << 20, kAlign = size_t(2) << 20;
  void* raw = ::mmap(nullptr, kBytes + kAlign, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return -1;
  auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kAlign - 1) & ~(kAlign - 1));
  if (huge_page_advice) ::madvise(p, kBytes, MADV_HUGEPAGE);
  timespec start{}, end{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  std::memset(p, 1, kBytes);
  ::clock_gettime(CLOCK_MONOTONIC, &end);
  ::munmap(raw, kBytes + kAlign);
  const double seconds = double(end.tv_sec - start.tv_sec) + double(end.tv_nsec - start.tv_nsec) / 1e9;
  return seconds * 1e6 / double(kBytes / 4096);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: qvl_map_cost FILE...\n");
    return 2;
  }
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      const qvl::MappedFile file(argv[i]);
      const double gb = double(file.size()) / 1e9;
      const double seconds = qvl::cached_mapping_cpu_seconds(argv[i]);
      if (seconds < 0) throw qvl::Error("this kernel lacks MADV_POPULATE_READ (Linux 5.14)");
      std::printf("%s: %.1f MB, mapping its cached pages: %.3f CPU s (%.3f per GB)\n", argv[i], gb * 1e3, seconds,
                  gb > 0 ? seconds / gb : 0.0);
      const qvl::MappedFile fresh(argv[i]);
      if (const int e = qvl::populate_pages(fresh.data(), fresh.size()); e != 0)
        throw qvl::Error(std::string(argv[i]) + ": cannot read its pages: " + std::strerror(e));
      const double first = touch_seconds(fresh), second = touch_seconds(fresh);
      std::printf("%s: first read of each mapped page: %.3f CPU s per GB (a second read: %.3f)\n", argv[i],
                  gb > 0 ? first / gb : 0.0, gb > 0 ? second / gb : 0.0);
    } catch (const qvl::Error& e) {
      std::fprintf(stderr, "qvl_map_cost: %s\n", e.what());
      status = 1;
    }
  }
  std::printf("fresh anonymous memory, first write: %.2f us per 4 KiB page in small pages, %.2f with huge-page "
              "advice\n",
              first_write_us_per_page(false), first_write_us_per_page(true));
  return status;
}
