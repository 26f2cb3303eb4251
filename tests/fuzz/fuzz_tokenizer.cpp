// Tokenizer::encode of arbitrary bytes; decode and StreamDecoder of arbitrary
// ids. The real Qwen3 tokenizer is loaded once, from $QVL_FUZZ_TOKENIZER or
// the fixture path compiled in.
#include "harness.h"

static const qvl::Tokenizer& tokenizer() {
  static const qvl::Tokenizer tok = [] {
    const char* env = std::getenv("QVL_FUZZ_TOKENIZER");
    return qvl::Tokenizer::load(env && *env ? env : QVL_FUZZ_TOKENIZER);
  }();
  return tok;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  qvl::fuzz::run_tokenizer(tokenizer(), data, size);
  return 0;
}
