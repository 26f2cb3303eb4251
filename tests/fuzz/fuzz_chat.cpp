// Chat messages JSON: parse_messages, render_chat, expand_image_pads.
#include "harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_chat(data, size);
  return 0;
}
