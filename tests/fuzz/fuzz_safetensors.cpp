// A .safetensors file from untrusted bytes: header length, JSON header, offsets.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_safetensors(data, size);
  return 0;
}
