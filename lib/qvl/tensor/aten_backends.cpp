#include "qvl/tensor/aten_backends.h"

#include <ATen/Context.h>

#include <mutex>

namespace qvl::tensor {

void configure_aten_backends() {
#if defined(__aarch64__)
  static std::once_flag once;
  std::call_once(once, [] { at::globalContext().setUserEnabledMkldnn(false); });
#endif
}

bool aten_bf16_is_inexact() {
#if defined(__aarch64__)
  return true;
#else
  return false;
#endif
}

}  // namespace qvl::tensor
