#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "qvl/error.h"
#include "qvl/kernels/cpu.h"

// The suite runs once per CPU tier (tests/CMakeLists.txt sets QVL_ISA); a
// tier this CPU cannot run is a skip (77), not a failure.
int main(int argc, char** argv) {
  try {
    std::printf("qvl_model_tests: kernels %s\n", qvl::kernels::isa_description().c_str());
  } catch (const qvl::Error& e) {
    std::printf("qvl_model_tests: skipped: %s\n", e.what());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
