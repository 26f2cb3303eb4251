// PNG/JPEG decoding (magic bytes, headers, EXIF orientation) and preprocessing.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_image(data, size);
  return 0;
}
