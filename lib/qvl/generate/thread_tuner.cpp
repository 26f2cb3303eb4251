#include "qvl/generate/thread_tuner.h"

#include <algorithm>
#include <vector>

namespace qvl {
namespace {

template <class Value>
double median(std::vector<Value> values) {
  const auto middle = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return double(*middle);
}

}  // namespace

ThreadTuner::ThreadTuner(const Options& options) : options_(options), current_(std::max(1, options.most)) {
  options_.most = current_;
  options_.window = std::max(options_.window, 1);
  options_.min_samples = std::clamp(options_.min_samples, 1, options_.window);
  options_.confirmations = std::max(options_.confirmations, 1);
  options_.first_gap = std::max(options_.first_gap, 1);
  options_.max_gap = std::max(options_.max_gap, options_.first_gap);
  gap_ = options_.first_gap;
}

double ThreadTuner::median_wall() const {
  std::vector<double> walls;
  for (const Step& s : recent_) walls.push_back(s.wall_s);
  return median(walls);
}

bool ThreadTuner::waiting_for_cores() const {
  if (int(recent_.size()) < options_.min_samples) return false;
  std::vector<double> shares;
  for (const Step& s : recent_) shares.push_back(s.cpu_share);
  return median(shares) < options_.busy_share;
}

int ThreadTuner::probe_target() const {
  if (waiting_for_cores() && current_ > 1) return current_ - 1;
  if (current_ < options_.most) return current_ + 1;
  return current_;
}

int ThreadTuner::next_threads() {
  if (probing_ != 0) return probing_;  // a winning probe, to be confirmed
  if (int(recent_.size()) < options_.min_samples || since_probe_ < gap_) return current_;
  return probe_target();
}

void ThreadTuner::record(int threads, double wall_s, double cpu_s) {
  const double share = wall_s > 0 && threads > 0 ? cpu_s / (wall_s * threads) : 1.0;
  if (threads != current_) {  // a probe
    ++probes_;
    const bool won = int(recent_.size()) >= options_.min_samples && wall_s < (1 - options_.faster_by) * median_wall();
    if (!won) {
      probing_ = 0;
      wins_.clear();
      gap_ = std::min(2 * gap_, options_.max_gap);
      since_probe_ = 0;
      return;
    }
    if (threads != probing_) wins_.clear();
    probing_ = threads;
    wins_.push_back({wall_s, share});
    if (int(wins_.size()) >= options_.confirmations) switch_to(threads);
    return;
  }
  recent_.push_back({wall_s, share});
  if (int(recent_.size()) > options_.window) recent_.pop_front();
  ++since_probe_;
}

void ThreadTuner::switch_to(int threads) {
  current_ = threads;
  recent_ = std::move(wins_);  // steps that ran on it, and recently
  wins_.clear();
  probing_ = 0;
  gap_ = options_.first_gap;
  since_probe_ = 0;
  ++switches_;
}

void ThreadTuner::forget_timings() {
  recent_.clear();
  wins_.clear();
  probing_ = 0;
  since_probe_ = 0;
}

}  // namespace qvl
