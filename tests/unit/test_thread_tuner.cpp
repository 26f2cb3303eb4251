// The decode steps' thread tuner against a simulated machine: each step's wall
// time and CPU share come from a model of 2 (or 4) cores, alone or beside
// busy processes, with noise. The figures are those measured on the
// development machine (docs/PERFORMANCE.md, "Fair on a shared machine"): at
// 2 threads alone a step takes 1.0 (share ~1), at 1 thread 1.4; beside one
// busy loop 2 threads take 2.5 (share ~0.65), 1 thread 1.45 (share 1).
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <random>

#include "qvl/generate/thread_tuner.h"

using namespace qvl;

namespace {

struct StepTime {
  double wall_s;
  double cpu_share;
};

// A machine: the step time and CPU share of a step on `threads` threads at step `i`.
using Machine = std::function<StepTime(int threads, int64_t i)>;

// 2 cores; `busy` other CPU-bound processes.
StepTime two_cores(int threads, int busy) {
  if (busy == 0) return threads >= 2 ? StepTime{1.0, 0.97} : StepTime{1.4, 1.0};
  return threads >= 2 ? StepTime{2.5, 0.65} : StepTime{1.45, 1.0};
}

struct Run {
  std::map<int, int64_t> steps;  // by thread count
  int last = 0;                  // the count of the last step
  double total_s = 0;
};

// Runs `n` steps from step `first` on `machine` with multiplicative noise of +-`noise`.
Run run(ThreadTuner& tuner, const Machine& machine, int64_t n, double noise = 0.05, int64_t first = 0,
        unsigned seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  Run r;
  for (int64_t i = first; i < first + n; ++i) {
    const int threads = tuner.next_threads();
    REQUIRE(threads >= 1);
    REQUIRE(threads <= tuner.most());
    const StepTime t = machine(threads, i);
    const double wall = t.wall_s * jitter(rng);
    tuner.record(threads, wall, wall * threads * std::min(1.0, t.cpu_share * jitter(rng)));
    ++r.steps[threads];
    r.last = threads;
    r.total_s += wall;
  }
  return r;
}

ThreadTuner tuner_for(int most) {
  ThreadTuner::Options o;
  o.most = most;
  return ThreadTuner(o);
}

}  // namespace

TEST_CASE("thread tuner: alone on its cores it never probes") {
  ThreadTuner tuner = tuner_for(2);
  Run r = run(tuner, [](int threads, int64_t) { return two_cores(threads, 0); }, 2000);
  CHECK(r.steps[2] == 2000);
  CHECK(tuner.probes() == 0);
  CHECK(tuner.current() == 2);
}

TEST_CASE("thread tuner: beside a busy process it settles on one thread within a few steps") {
  ThreadTuner tuner = tuner_for(2);
  int64_t switched_at = -1;
  const Machine busy = [](int threads, int64_t) { return two_cores(threads, 1); };
  for (int64_t i = 0; i < 20 && switched_at < 0; ++i) {
    run(tuner, busy, 1, 0.05, i, unsigned(i));
    if (tuner.current() == 1) switched_at = i;
  }
  CHECK(switched_at >= 0);
  CHECK(switched_at <= 8);  // 4 steps to see the share, 2 winning probes
  // From then on, the probes with two threads get rarer: few steps pay for them.
  Run after = run(tuner, busy, 1000);
  CHECK(after.last == 1);
  CHECK(after.steps[2] <= 22);  // gaps 4, 8, 16, 32, then 64: ~19 probes in 1000 steps
  CHECK(after.steps[2] >= 10);  // but it keeps looking
  CHECK(tuner.switches() == 1);
}

TEST_CASE("thread tuner: follows a busy process that comes and goes") {
  ThreadTuner tuner = tuner_for(2);
  // Busy from step 200 to 600.
  const Machine machine = [](int threads, int64_t i) { return two_cores(threads, i >= 200 && i < 600 ? 1 : 0); };
  Run alone = run(tuner, machine, 200, 0.05, 0);
  CHECK(alone.steps[2] == 200);
  Run busy = run(tuner, machine, 400, 0.05, 200);
  CHECK(busy.last == 1);
  CHECK(busy.steps[1] >= 370);  // switched within a few steps of the start
  Run free_again = run(tuner, machine, 400, 0.05, 600);
  CHECK(free_again.last == 2);
  CHECK(free_again.steps[2] >= 300);  // noticed within one probe gap (at most 64 steps)
  CHECK(tuner.switches() == 2);
}

TEST_CASE("thread tuner: when fewer threads are not faster, probes get rare and it stays") {
  // Threads that wait passively: a low CPU share alone, yet two threads are faster.
  ThreadTuner tuner = tuner_for(2);
  const Machine passive = [](int threads, int64_t) { return threads >= 2 ? StepTime{1.0, 0.6} : StepTime{1.4, 1.0}; };
  Run r = run(tuner, passive, 2000, 0.1);
  CHECK(tuner.current() == 2);
  CHECK(tuner.switches() == 0);
  CHECK(r.steps[1] <= 2000 / 64 + 6);  // gaps 4, 8, 16, 32, then 64
  CHECK(r.total_s <= 2000 * 1.0 * 1.015);
}

TEST_CASE("thread tuner: one lucky probe does not make it switch") {
  ThreadTuner::Options o;
  o.most = 2;
  ThreadTuner tuner(o);
  for (int i = 0; i < 4; ++i) tuner.record(2, 1.0, 2 * 0.5);  // waiting for cores: share 0.5
  REQUIRE(tuner.next_threads() == 1);
  tuner.record(1, 0.5, 0.5);  // much faster, once
  REQUIRE(tuner.next_threads() == 1);  // confirming
  tuner.record(1, 1.1, 1.1);  // not faster after all
  CHECK(tuner.current() == 2);
  CHECK(tuner.next_threads() == 2);  // and the next probe waits longer
  CHECK(tuner.switches() == 0);
}

TEST_CASE("thread tuner: a probe needs to be clearly faster") {
  ThreadTuner tuner = tuner_for(2);
  for (int i = 0; i < 4; ++i) tuner.record(2, 1.0, 2 * 0.5);
  for (int i = 0; i < 10; ++i) {
    const int t = tuner.next_threads();
    tuner.record(t, t == 1 ? 0.9 : 1.0, t == 1 ? 0.9 : 1.0);  // 10 % faster: within the noise
  }
  CHECK(tuner.current() == 2);
  CHECK(tuner.probes() >= 1);
}

TEST_CASE("thread tuner: forgotten timings are not compared with") {
  ThreadTuner tuner = tuner_for(2);
  for (int i = 0; i < 8; ++i) tuner.record(2, 3.0, 2 * 3.0 * 0.5);  // slow steps, waiting for cores
  REQUIRE(tuner.next_threads() == 1);
  tuner.forget_timings();  // e.g. the batch shrank: new steps take less
  for (int i = 0; i < 4; ++i) {
    CHECK(tuner.next_threads() == 2);  // a probe waits for steps to compare with
    tuner.record(2, 1.0, 2 * 1.0 * 0.5);
  }
  REQUIRE(tuner.next_threads() == 1);
  tuner.record(1, 2.0, 2.0);  // faster than the forgotten steps, slower than the new ones
  CHECK(tuner.next_threads() == 2);  // lost: no second probe
  CHECK(tuner.switches() == 0);
}

TEST_CASE("thread tuner: one configured thread stays one") {
  ThreadTuner tuner = tuner_for(1);
  Run r = run(tuner, [](int, int64_t) { return StepTime{1.0, 0.3}; }, 100);
  CHECK(r.steps[1] == 100);
  CHECK(tuner.probes() == 0);
}

TEST_CASE("thread tuner: on 4 cores beside one busy process it gives up one thread, not more") {
  // Threads beyond the free cores share them with the busy process and
  // hold up every barrier; fewer threads than free cores stream less.
  const Machine four = [](int threads, int64_t) {
    const int free_cores = 3;
    if (threads > free_cores) return StepTime{2.0, 0.8 * free_cores / threads};
    return StepTime{1.0 * free_cores / threads, 1.0};
  };
  ThreadTuner tuner = tuner_for(4);
  Run settle = run(tuner, four, 50);
  CHECK(tuner.current() == 3);
  CHECK(settle.steps[4] <= 8);
  Run r = run(tuner, four, 1000);
  CHECK(r.last == 3);
  CHECK(r.steps[3] >= 960);
  CHECK(r.steps[2] == 0);  // 3 threads get their cores: nothing to give up
}
