#include "qvl/decoder/torch_view.h"

#include <cstdint>

#include "qvl/error.h"

namespace qvl {

at::ScalarType to_scalar_type(DType t) {
  switch (t) {
    case DType::BF16: return at::kBFloat16;
    case DType::F16: return at::kHalf;
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
  }
  throw Error("unknown dtype");
}

at::Tensor tensor_view(const TensorView& v) {
  at::Tensor t = at::from_blob(const_cast<uint8_t*>(v.data), v.shape, at::TensorOptions().dtype(to_scalar_type(v.dtype)));
  // safetensors does not promise aligned tensor data; kernels do assume it.
  // A misaligned tensor (rare: hand-made files) is copied instead of viewed.
  if (reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype) != 0) return t.clone();
  return t;
}

}  // namespace qvl
