// Bridges checkpoint views to ATen tensors: big ones alias the mapping,
// small ones are copied (torch_view.cpp says why).
#pragma once
#include <ATen/ATen.h>

#include "qvl/io/safetensors.h"

namespace qvl {

at::ScalarType to_scalar_type(DType t);

// A tensor aliasing the mmapped bytes, or for a tensor under 1 MB (or a
// misaligned one) a copy read from the file. The caller keeps the Checkpoint
// alive. The memory may be read-only: never write through the result.
at::Tensor tensor_view(const TensorView& v);

// Whether tensor_view copies v rather than aliasing the mapping: the pages of
// such a tensor need no populating through the mapping.
bool tensor_is_copied(const TensorView& v);

}  // namespace qvl
