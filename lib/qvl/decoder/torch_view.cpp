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

namespace {

// Tensors smaller than this are read into memory of their own instead of being
// used in place: touching one inside the mapping maps the whole page-cache
// folio around it, up to 2 MB of the big weights beside it. Quantized runs
// read the norms and biases but not the bf16 matrices between them; in 2 MB
// folios that cost ~330 MB of resident set on the 2B model
// (docs/PERFORMANCE.md, "Huge pages for the checkpoint's mapping").
constexpr size_t kCopyBelowBytes = size_t(1) << 20;

// safetensors does not promise aligned tensor data; kernels do assume it.
// A misaligned tensor (rare: hand-made files) is copied instead of viewed.
bool misaligned(const TensorView& v) { return reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype) != 0; }

}  // namespace

bool tensor_is_copied(const TensorView& v) { return v.source && (v.nbytes < kCopyBelowBytes || misaligned(v)); }

at::Tensor tensor_view(const TensorView& v) {
  const at::TensorOptions options = at::TensorOptions().dtype(to_scalar_type(v.dtype));
  if (tensor_is_copied(v)) {
    at::Tensor copy = at::empty(v.shape, options);
    v.read_bytes(0, v.nbytes, copy.data_ptr());
    return copy;
  }
  at::Tensor t = at::from_blob(const_cast<uint8_t*>(v.data), v.shape, options);
  return misaligned(v) ? t.clone() : t;
}

}  // namespace qvl
