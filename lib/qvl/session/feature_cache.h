// Vision features of recently seen images, keyed by the preprocessed pixels
// (so the same file at the same --min/--max-pixels hits, and a different
// resize does not). Asking again about an image skips the vision encoder.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "qvl/image/preprocess.h"

namespace qvl {

struct ImageFeatures {
  at::Tensor embeds;                  // [tokens, hidden]
  std::vector<at::Tensor> deepstack;  // one per deepstack layer, same shape
  int64_t bytes() const;
};

class FeatureCache {
 public:
  explicit FeatureCache(int64_t max_bytes) : max_bytes_(max_bytes) {}
  static std::string key_of(const PatchifiedImage& image);  // sha256 of grid + pixels
  const ImageFeatures* find(const std::string& key);         // refreshes its recency
  void put(const std::string& key, ImageFeatures features);  // evicts least recently used
  int64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }

 private:
  using Entry = std::pair<std::string, ImageFeatures>;
  int64_t max_bytes_;
  int64_t bytes_ = 0;
  std::list<Entry> entries_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace qvl
