#include "qvl/session/feature_cache.h"

#include "qvl/io/sha256.h"

namespace qvl {

int64_t ImageFeatures::bytes() const {
  int64_t n = embeds.defined() ? embeds.nbytes() : 0;
  for (const auto& d : deepstack) n += d.nbytes();
  return n;
}

std::string FeatureCache::key_of(const PatchifiedImage& image) {
  Sha256 h;
  const int64_t grid[3] = {image.grid.t, image.grid.h, image.grid.w};
  h.update(grid, sizeof grid);
  h.update(image.pixel_values.data(), image.pixel_values.size() * sizeof(float));
  return h.hex_digest();
}

const ImageFeatures* FeatureCache::find(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, it->second);
  return &it->second->second;
}

void FeatureCache::put(const std::string& key, ImageFeatures features) {
  if (max_bytes_ <= 0 || features.bytes() > max_bytes_ || index_.count(key)) return;
  bytes_ += features.bytes();
  entries_.emplace_front(key, std::move(features));
  index_[key] = entries_.begin();
  while (bytes_ > max_bytes_) {
    bytes_ -= entries_.back().second.bytes();
    index_.erase(entries_.back().first);
    entries_.pop_back();
  }
}

}  // namespace qvl
