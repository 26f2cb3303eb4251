// model.safetensors.index.json from untrusted bytes, beside two valid shards.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const qvl::fuzz::CheckpointFolder folder;
  qvl::fuzz::run_checkpoint_index(folder, data, size);
  return 0;
}
