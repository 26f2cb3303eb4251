// What mapping a file that is already in the page cache costs: the CPU time
// of filling the page tables for all of it (MADV_POPULATE_READ), twice, so
// that the second figure is the page cache's state alone (the first also
// reads from disk whatever is not cached). A file in 2 MB folios maps for
// ~0.002 s per GB, one in small folios for 0.04-0.08 s (docs/PERFORMANCE.md,
// "The page cache's state").
//
//   qvl_map_cost FILE...
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

// CPU seconds to populate a fresh read-only mapping of the file, or < 0.
double populate_cost(int fd, size_t size) {
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);  // as qvl maps checkpoints
  if (p == MAP_FAILED) return -1;
  const double start = cpu_seconds();
  const int rc = madvise(p, size, MADV_POPULATE_READ);
  const double cost = cpu_seconds() - start;
  munmap(p, size);
  return rc == 0 ? cost : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: qvl_map_cost FILE...\n");
    return 2;
  }
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    const int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
      std::fprintf(stderr, "qvl_map_cost: cannot map %s\n", argv[i]);
      status = 1;
      if (fd >= 0) close(fd);
      continue;
    }
    const size_t size = size_t(st.st_size);
    const double first = populate_cost(fd, size), second = populate_cost(fd, size);
    close(fd);
    if (first < 0 || second < 0) {
      std::fprintf(stderr, "qvl_map_cost: MADV_POPULATE_READ failed on %s (Linux 5.14 or later)\n", argv[i]);
      status = 1;
      continue;
    }
    std::printf("%s: %.1f MB, populate CPU s first %.3f, cached %.3f (%.3f per GB)\n", argv[i], double(size) / 1e6,
                first, second, second / (double(size) / 1e9));
  }
  return status;
}
