// How much memory a session will need, estimated from config.json before any
// weight is loaded, and the check that refuses to start (or to encode an
// image) when that would not fit. Refusing up front with a clear message beats
// being killed by the OOM killer half-way through a 4 GB load.
//
// The figures are resident bytes, deliberately a little pessimistic: the KV
// cache is counted at its full size although its pages are only committed as
// the context grows, and every transient buffer of the vision tower is counted
// as alive at once. Pages of the checkpoint that the page cache already holds
// are counted too: they would be evicted rather than shared under pressure.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qvl/model/config.h"
#include "qvl/model/grid.h"
#include "qvl/model/precision.h"

namespace qvl {

// The session settings the estimate depends on (spelled as in SessionOptions).
struct MemoryOptions {
  ComputeDtype dtype = ComputeDtype::BF16;  // of weights, KV cache and activations
  WeightQuant quant = WeightQuant::None;    // Int8: decoder projections and lm_head
  int64_t max_context = 4096;
  int threads = 0;             // 0: every core; each runs one vision attention block at a time
};

// Bytes, by what holds them.
struct MemoryEstimate {
  int64_t text_weights = 0;
  int64_t kv_cache = 0;
  int64_t vision_weights = 0;
  int64_t runtime = 0;  // libtorch's code and allocator, the tokenizer, small buffers
  int64_t images = 0;   // one turn's images: pixels, vision activations, their prefill
  int64_t total() const { return text_weights + kv_cache + vision_weights + runtime + images; }
};

// Everything but images.
MemoryEstimate estimate_session_memory(const ModelConfig& cfg, const MemoryOptions& opts);
// The transient cost of encoding these images in one turn and prefilling their tokens.
int64_t estimate_image_memory(const ModelConfig& cfg, const MemoryOptions& opts, const std::vector<ImageGrid>& grids);

// "about 9.1 GB" / "about 12 MB" (binary units).
std::string format_bytes(int64_t bytes);

// MemAvailable from the text of /proc/meminfo, in bytes; 0 when absent.
int64_t parse_mem_available(const std::string& meminfo_text);
// The same for this machine; 0 when /proc/meminfo cannot be read.
int64_t mem_available_bytes();

// The limit a session is held to and the checks against it.
class MemoryBudget {
 public:
  // limit_mb > 0: that limit (--max-memory); 0: what the kernel reports as
  // available now. Throws qvl::Error when the session itself does not fit.
  MemoryBudget(const ModelConfig& cfg, const MemoryOptions& opts, int64_t limit_mb);

  // Throws qvl::Error, before any image work, when the session plus these
  // images (one turn) would exceed the limit.
  void check_images(const std::vector<ImageGrid>& grids) const;

  // Throws qvl::Error when `sequences` more KV caches (batched decoding, each
  // counted at max_context) would exceed the limit.
  void check_batch(int64_t sequences) const;

  const MemoryEstimate& session() const { return session_; }
  int64_t limit_bytes() const { return limit_bytes_; }  // 0: no limit known

 private:
  void check(const MemoryEstimate& need, const std::string& advice) const;

  ModelConfig cfg_;
  MemoryOptions opts_;
  MemoryEstimate session_;
  int64_t limit_bytes_ = 0;
  std::string limit_text_;  // "--max-memory is 4096 MB", for messages
};

}  // namespace qvl
