// The JSON Lines results file that `qvl ocr --resume` reads back.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_jsonl(data, size);
  return 0;
}
