// The cache files qvl reads back from a model folder's .qvl-cache/, which
// anyone who can write that folder controls: quantized weights (int8, int4)
// and prompt-cache entries.
#include <cstdlib>

#include "harness.h"

// With QVL_FUZZ_WRITE_SEEDS=DIR it writes small valid files of each kind to
// DIR and exits: scripts/fuzz.sh makes the seed corpus this way, as files made
// by qvl's own writers.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("QVL_FUZZ_WRITE_SEEDS")) {
    qvl::fuzz::write_cache_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_weight_cache(data, size);
  qvl::fuzz::run_prompt_entry(data, size);
  return 0;
}
