#include "qvl/decoder/kv_cache.h"

#include <fmt/format.h>

#include "qvl/error.h"

namespace qvl {

KvCache::KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_context, at::ScalarType dtype)
    : capacity_(max_context) {
  if (max_context <= 0) throw Error(fmt::format("max_context must be positive, got {}", max_context));
  // at::empty leaves the memory untouched, so the OS commits pages only as the
  // context actually grows.
  for (int64_t i = 0; i < layers; ++i) {
    keys_.push_back(at::empty({kv_heads, max_context, head_dim}, at::TensorOptions().dtype(dtype)));
    values_.push_back(at::empty({kv_heads, max_context, head_dim}, at::TensorOptions().dtype(dtype)));
  }
}

void KvCache::check_room(int64_t n) const {
  if (size_ + n > capacity_)
    throw Error(fmt::format("context full: {} cached + {} new tokens exceed max_context {} (raise --max-context)",
                            size_, n, capacity_));
}

void KvCache::store(int64_t layer, const at::Tensor& keys, const at::Tensor& values) {
  const int64_t n = keys.size(1);
  check_room(n);
  keys_[layer].narrow(1, size_, n).copy_(keys);
  values_[layer].narrow(1, size_, n).copy_(values);
}

void KvCache::commit(int64_t n) {
  check_room(n);
  size_ += n;
}

void KvCache::truncate(int64_t n) {
  if (n < 0 || n > size_)
    throw Error(fmt::format("cannot truncate the context to {} tokens: it holds {}", n, size_));
  size_ = n;
}

}  // namespace qvl
