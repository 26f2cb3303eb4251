// Keys and values of every decoder layer for up to max_context tokens,
// allocated once: [kv_heads, max_context, head_dim] per layer and kind.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace qvl {

class KvCache {
 public:
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_context, at::ScalarType dtype);

  int64_t size() const { return size_; }  // tokens held
  int64_t capacity() const { return capacity_; }
  // Throws qvl::Error unless n more tokens fit.
  void check_room(int64_t n) const;

  // Writes one layer's keys and values [kv_heads, n, head_dim] for the n tokens
  // after size(); the tokens count as held only after commit(n).
  void store(int64_t layer, const at::Tensor& keys, const at::Tensor& values);
  // Views of the first n positions of a layer: [kv_heads, n, head_dim].
  at::Tensor keys(int64_t layer, int64_t n) const { return keys_[layer].narrow(1, 0, n); }
  at::Tensor values(int64_t layer, int64_t n) const { return values_[layer].narrow(1, 0, n); }

  void commit(int64_t n);
  void truncate(int64_t n);  // keep the first n tokens
  void reset() { size_ = 0; }

 private:
  std::vector<at::Tensor> keys_, values_;
  int64_t capacity_;
  int64_t size_ = 0;
};

}  // namespace qvl
