#include "qvl/decoder/kv_cache.h"

#include <fmt/format.h>

#include <algorithm>

#include "qvl/error.h"
#include "qvl/tensor/huge_page_tensor.h"

namespace qvl {

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_context, at::ScalarType dtype)
    : layers_(layers), kv_heads_(kv_heads), head_dim_(head_dim), max_context_(max_context), dtype_(dtype) {
  if (max_context <= 0) throw Error(fmt::format("max_context must be positive, got {}", max_context));
}

void KvCache::check_room(int64_t n) const {
  if (size_ + n > max_context_)
    throw Error(fmt::format("context full: {} cached + {} new tokens exceed max_context {} (raise --max-context)",
                            size_, n, max_context_));
}

void KvCache::reserve(int64_t n) {
  check_room(n);
  const int64_t needed = size_ + n;
  if (needed <= capacity_) return;
  // At least doubling, so that a context grown token by token is copied O(1) times per token.
  const int64_t wanted = std::max(needed, 2 * capacity_);
  const int64_t capacity = std::min(max_context_, (wanted + kCapacityStep - 1) / kCapacityStep * kCapacityStep);
  // Layer by layer: the old and new buffers together never take more than the new ones plus one old layer.
  for (int64_t layer = 0; layer < layers_; ++layer) {
    at::Tensor grown =
        tensor::empty_huge_paged({2, kv_heads_, capacity, head_dim_}, at::TensorOptions().dtype(dtype_));
    if (layer < int64_t(kv_.size())) {
      // All old positions, not only size(): a store() of this step may already have written past it.
      grown.narrow(2, 0, capacity_).copy_(kv_[size_t(layer)]);
      kv_[size_t(layer)] = grown;
    } else {
      kv_.push_back(grown);
    }
  }
  capacity_ = capacity;
}

void KvCache::store(int64_t layer, const at::Tensor& keys, const at::Tensor& values) {
  const int64_t n = keys.size(1);
  reserve(n);
  this->keys(layer, capacity_).narrow(1, size_, n).copy_(keys);
  this->values(layer, capacity_).narrow(1, size_, n).copy_(values);
}

at::Tensor KvCache::view(int64_t layer, int64_t kind, int64_t n) const {
  if (layer < 0 || layer >= layers_ || n < 0 || n > capacity_)
    throw Error(fmt::format("no KV cache view of layer {} and {} positions (there are {} layers and {} positions)",
                            layer, n, layers_, capacity_));
  if (kv_.empty()) return at::empty({kv_heads_, 0, head_dim_}, at::TensorOptions().dtype(dtype_));
  return kv_[size_t(layer)].select(0, kind).narrow(1, 0, n);
}

void KvCache::commit(int64_t n) {
  check_room(n);
  if (size_ + n > capacity_)
    throw Error(fmt::format("cannot commit {} tokens: {} are held and there is room for {}", n, size_, capacity_));
  size_ += n;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    throw Error(fmt::format("cannot truncate the context to {} tokens: it holds {}", n, size_));
  size_ = n;
}

}  // namespace qvl
