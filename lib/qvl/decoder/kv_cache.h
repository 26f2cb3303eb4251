// Keys and values of every decoder layer for up to max_context tokens:
// [kv_heads, capacity, head_dim] per layer and kind, where the capacity grows
// with the context (in steps of kCapacityStep positions, at least doubling)
// up to max_context.
//
// Why grow instead of reserving max_context at once: each layer's buffer is
// one huge-page-advised mapping (tensor/huge_page_tensor.h), because a fresh
// 4 KiB page costs 15-22 us at its first write on some VMs, and restoring a
// 305-token prefix writes ~35 MB. A head's rows are `capacity` apart, so a
// max_context-sized buffer in 2 MB pages would commit all of it (448 MB for
// the 2B model at 4096) for a short prompt.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace qvl {

class KvCache {
 public:
  // The buffers grow in multiples of this many positions: 2 MB per layer for
  // the 2B model in bf16 (8 heads of 128), one huge page.
  static constexpr int64_t kCapacityStep = 512;

  // Allocates nothing yet: the first reserve() or store() does.
  KvCache(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t max_context, at::ScalarType dtype);

  int64_t size() const { return size_; }          // tokens held
  int64_t capacity() const { return capacity_; }  // positions allocated: the stride between heads
  int64_t max_context() const { return max_context_; }
  // Throws qvl::Error unless n more tokens fit in max_context.
  void check_room(int64_t n) const;
  // check_room(n), then grows the buffers of every layer (keeping what they
  // hold) so that capacity() >= size() + n.
  void reserve(int64_t n);

  // Writes one layer's keys and values [kv_heads, n, head_dim] for the n tokens
  // after size() (reserving room first); the tokens count as held only after
  // commit(n).
  void store(int64_t layer, const at::Tensor& keys, const at::Tensor& values);
  // Views of the first n <= capacity() positions of a layer: [kv_heads, n,
  // head_dim]. Valid until the next reserve() or store() that grows the buffers.
  at::Tensor keys(int64_t layer, int64_t n) const { return view(layer, 0, n); }
  at::Tensor values(int64_t layer, int64_t n) const { return view(layer, 1, n); }

  void commit(int64_t n);
  void truncate(int64_t n);  // keep the first n tokens
  void reset() { size_ = 0; }  // the buffers stay, for the next conversation

 private:
  at::Tensor view(int64_t layer, int64_t kind, int64_t n) const;

  std::vector<at::Tensor> kv_;  // per layer: [2 (keys, values), kv_heads, capacity, head_dim]
  int64_t layers_, kv_heads_, head_dim_, max_context_;
  at::ScalarType dtype_;
  int64_t capacity_ = 0;
  int64_t size_ = 0;
};

}  // namespace qvl
