// What mapping a file that is already in the page cache costs this process
// (io/mapped_file.h, cached_mapping_cpu_seconds): ~0.002 s per GB for a file
// in 2 MB folios, 0.04-0.08 s for one in small folios (docs/PERFORMANCE.md,
// "The page cache's state"). `qvl bench` reports the same for the checkpoint.
//
//   qvl_map_cost FILE...
#include <cstdio>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"

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
    } catch (const qvl::Error& e) {
      std::fprintf(stderr, "qvl_map_cost: %s\n", e.what());
      status = 1;
    }
  }
  return status;
}
