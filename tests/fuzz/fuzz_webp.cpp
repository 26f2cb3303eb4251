// The WEBP decoder alone (other inputs are skipped): pages, decoding, preprocessing.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_image_format(qvl::ImageFormat::Webp, data, size);
  return 0;
}
