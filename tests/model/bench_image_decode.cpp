// Decode + preprocess time and peak memory of one image, with or without
// telling the decoder the target size (DecodeRequest::target_max_pixels, which
// lets a large JPEG be decoded at 1/2, 1/4 or 1/8 scale). Run by hand, one mode
// per process so that the peak RSS is that mode's own:
//
//   build/tests/qvl_bench_image_decode IMAGE PREPROCESSOR_CONFIG full|scaled [MAX_PIXELS] [REPEATS]
//
// Prints one line per repeat: mode, decoded size, decode ms, preprocess ms, grid, peak RSS.
#include <fmt/core.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/mapped_file.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} IMAGE PREPROCESSOR_CONFIG full|scaled [MAX_PIXELS] [REPEATS]\n", argv[0]);
    return 2;
  }
  try {
    const std::string mode = argv[3];
    qvl::PreprocessorConfig cfg = qvl::parse_preprocessor_config(qvl::read_text_file(argv[2]));
    if (argc > 4) cfg.max_pixels = std::atoll(argv[4]);
    const int repeats = argc > 5 ? std::atoi(argv[5]) : 3;
    const std::vector<uint8_t> bytes = qvl::read_image_bytes(argv[1]);
    qvl::DecodeRequest request;
    if (mode == "scaled") request.target_max_pixels = cfg.max_pixels;
    using clock = std::chrono::steady_clock;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = clock::now();
      const qvl::RgbImage image = qvl::decode_image(bytes.data(), bytes.size(), argv[1], {}, request);
      const auto t1 = clock::now();
      const qvl::PatchifiedImage patches = qvl::preprocess_image(image, cfg);
      const auto t2 = clock::now();
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      fmt::print("{:6s} decoded {}x{}  decode {:7.1f} ms  preprocess {:7.1f} ms  grid {}x{}  peak RSS {:.0f} MB\n", mode,
                 image.width, image.height, std::chrono::duration<double, std::milli>(t1 - t0).count(),
                 std::chrono::duration<double, std::milli>(t2 - t1).count(), patches.grid.h, patches.grid.w,
                 usage.ru_maxrss / 1024.0);
    }
  } catch (const qvl::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
