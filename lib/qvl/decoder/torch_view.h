// Bridges checkpoint views to ATen tensors without copying.
#pragma once
#include <ATen/ATen.h>

#include "qvl/io/safetensors.h"

namespace qvl {

at::ScalarType to_scalar_type(DType t);

// A tensor aliasing the mmapped bytes. The caller keeps the Checkpoint alive.
// The memory is read-only: never write through the result.
at::Tensor tensor_view(const TensorView& v);

}  // namespace qvl
