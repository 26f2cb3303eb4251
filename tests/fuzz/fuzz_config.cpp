// config.json, preprocessor_config.json and generation_config.json parsers.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_configs(data, size);
  return 0;
}
