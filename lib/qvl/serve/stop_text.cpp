#include "qvl/serve/stop_text.h"

#include <algorithm>

namespace qvl::serve {

StopText::StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
}

std::string StopText::push(const std::string& piece) {
  if (stopped_) return "";
  held_ += piece;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Keep the longest tail that a stop string starts with. Such a tail starts
  // where a stop string's first character does, so what is sent stays whole
  // UTF-8 characters.
  size_t keep = 0;
  for (const std::string& stop : stops_)
    for (size_t n = std::min(stop.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopText::finish() {
  std::string out;
  out.swap(held_);
  return stopped_ ? "" : out;
}

}  // namespace qvl::serve
