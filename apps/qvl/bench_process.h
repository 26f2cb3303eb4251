// qvl bench measures every run in a fresh process: it starts this very binary
// again (/proc/self/exe) and collects what the child prints.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qvl::app {

struct ChildResult {
  int exit_code = -1;  // -1 when the child was killed by a signal
  int signal = 0;      // the signal that killed it, else 0
  std::string out;     // everything it printed on stdout
  std::string err;     // ... and on stderr
  bool ok() const { return exit_code == 0; }
};

// CLOCK_MONOTONIC in nanoseconds. Unlike a process's own steady_clock origin it
// is one clock for every process on the machine, and unlike CLOCK_REALTIME it
// never jumps, so a child can subtract a reading its parent took.
int64_t monotonic_ns();

// Runs /proc/self/exe with `args` (argv[1..]) and stdin from /dev/null; waits
// for it. Throws qvl::Error only when the child cannot be started.
ChildResult run_self(const std::vector<std::string>& args);

// `count` CPU-bound processes (a bare busy loop each) for as long as the
// object lives: qvl bench --contend, to measure qvl beside other work on the
// same cores. They are killed and reaped in the destructor, and die with this
// process if it dies first (PR_SET_PDEATHSIG), so none outlives the bench.
class BusyLoops {
 public:
  explicit BusyLoops(int count);
  ~BusyLoops();
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;
  const std::vector<int>& pids() const { return pids_; }

 private:
  void stop();
  std::vector<int> pids_;
};

// The 1-minute load average (/proc/loadavg), or -1 when unreadable: recorded
// with each bench run so a reader can tell a busy machine's figures.
double load_average_1m();

// One line saying why a failed child failed: its own error message when it
// printed one, else how it ended (exit status or signal).
std::string failure_reason(const ChildResult& child);

}  // namespace qvl::app
