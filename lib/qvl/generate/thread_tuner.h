// How many threads the next decode step runs on, from the timings of the last
// ones. No clock and no threads of its own: the caller times each step, tells
// the tuner, and sets the count it asks for (session/session_generate.cpp).
//
// Why: a decode step opens hundreds of parallel regions, and each ends at a
// barrier. Beside another busy process on the same cores, the thread the
// scheduler has set aside holds up every one of them, and decode fell to
// ~40 % of its idle speed at 2 threads; one thread on the core the other
// process leaves free streams the weights at ~70 % of it (decode is
// memory-bound). Alone, all threads are faster. So the tuner watches
// whether the steps get the CPU time their threads could use:
//
//  - each step's CPU share = process CPU time / (wall time x threads). Alone
//    it stays near 1 (idle threads spin between regions); a share below
//    `busy_share` means the threads wait for cores. Only then does the tuner
//    try one thread fewer -- alone, it never probes and costs nothing;
//  - below the configured count it tries one thread more now and then, to
//    notice that the cores are free again;
//  - a probe is one step at the other count; it switches only when that count
//    beats the median of the recent steps at the current one by `faster_by`,
//    `confirmations` times in a row. A probe that loses doubles the wait
//    before the next one (up to `max_gap` steps), so a machine where the
//    current count stays best pays for few probes.
#pragma once
#include <cstdint>
#include <deque>

namespace qvl {

class ThreadTuner {
 public:
  struct Options {
    int most = 1;             // the configured count; the tuner chooses in [1, most]
    int window = 8;           // recent steps at the current count that make its median
    int min_samples = 4;      // steps at the current count before a probe is compared with them
    double faster_by = 0.15;  // a probe wins when it is this much faster than that median
    int confirmations = 2;    // winning probes in a row that make the tuner switch
    int first_gap = 4;        // steps at the current count between probes, at first ...
    int max_gap = 64;         // ... and at most (the gap doubles after each losing probe)
    double busy_share = 0.8;  // a median CPU share below this: the threads wait for cores
  };

  explicit ThreadTuner(const Options& options);

  // The count to run the next step with: the current one, or a probe.
  int next_threads();
  // A step that ran on `threads`, took `wall_s` and `cpu_s` of process CPU time.
  void record(int threads, double wall_s, double cpu_s);
  // The steps to come do not compare with the last ones (e.g. more or fewer
  // sequences per step): forgets their timings, keeps the count.
  void forget_timings();

  int current() const { return current_; }
  int most() const { return options_.most; }
  int64_t switches() const { return switches_; }
  int64_t probes() const { return probes_; }

 private:
  struct Step {
    double wall_s;
    double cpu_share;
  };
  double median_wall() const;
  bool waiting_for_cores() const;  // the recent steps' median CPU share is below busy_share
  int probe_target() const;        // the count a probe would try now (current_ when none)
  void switch_to(int threads);

  Options options_;
  int current_;
  std::deque<Step> recent_;    // the last steps at current_, oldest first
  int probing_ = 0;            // the count of a probe under way (winning so far), 0: none
  std::deque<Step> wins_;      // that probe's winning steps
  int gap_;                    // steps at current_ before the next probe
  int since_probe_ = 0;        // steps at current_ since the last probe (or switch)
  int64_t switches_ = 0, probes_ = 0;
};

}  // namespace qvl
