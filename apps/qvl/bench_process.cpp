#include "bench_process.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>

#include "qvl/error.h"

extern char** environ;

namespace qvl::app {
namespace {

const char* kSelf = "/proc/self/exe";

struct Pipe {
  int read_end = -1, write_end = -1;
  Pipe() {
    int fds[2];
    // Close-on-exec: the child sees only the ends dup2'ed onto its stdout/stderr.
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
    read_end = fds[0];
    write_end = fds[1];
  }
  ~Pipe() {
    close_write();
    if (read_end >= 0) ::close(read_end);
  }
  void close_write() {
    if (write_end >= 0) ::close(write_end);
    write_end = -1;
  }
};

// Reads both pipes until the child closes them; reading only one at a time
// could deadlock once the other fills up.
void drain(Pipe& out_pipe, std::string& out, Pipe& err_pipe, std::string& err) {
  pollfd fds[2] = {{out_pipe.read_end, POLLIN, 0}, {err_pipe.read_end, POLLIN, 0}};
  std::string* sinks[2] = {&out, &err};
  int open_count = 2;
  char buffer[65536];
  while (open_count > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("waiting for the benchmark child: {}", std::strerror(errno)));
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // poll ignores negative descriptors
        --open_count;
      }
    }
  }
}

std::string last_nonempty_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end - start + 1);
}

}  // namespace

int64_t monotonic_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ChildResult run_self(const std::vector<std::string>& args) {
  Pipe out_pipe, err_pipe;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe.write_end, 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe.write_end, 2);

  std::vector<char*> argv;
  std::string program = "qvl";
  argv.push_back(program.data());
  std::vector<std::string> owned = args;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, kSelf, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error(fmt::format("cannot start {}: {}", kSelf, std::strerror(rc)));

  out_pipe.close_write();
  err_pipe.close_write();
  ChildResult result;
  drain(out_pipe, result.out, err_pipe, result.err);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw Error(fmt::format("waiting for the benchmark child: {}", std::strerror(errno)));
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

BusyLoops::BusyLoops(int count) {
  const pid_t parent = ::getpid();
  for (int i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int error = errno;
      stop();  // the ones already started
      throw Error(fmt::format("cannot start a busy-loop process: {}", std::strerror(error)));
    }
    if (pid == 0) {
      // Only async-signal-safe calls after fork() in a threaded process: the
      // loop itself touches nothing but a register.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);  // the parent died before prctl
      for (volatile uint64_t spin = 0;; spin = spin + 1) {
      }
    }
    pids_.push_back(pid);
  }
}

BusyLoops::~BusyLoops() { stop(); }

void BusyLoops::stop() {
  for (int pid : pids_) ::kill(pid, SIGKILL);
  for (int pid : pids_)
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  pids_.clear();
}

double load_average_1m() {
  std::ifstream in("/proc/loadavg");
  double value = -1;
  if (!(in >> value)) return -1;
  return value;
}

std::string failure_reason(const ChildResult& child) {
  std::string line = last_nonempty_line(child.err);
  const std::string prefix = "qvl: error: ";
  if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
  if (child.signal == SIGKILL) return "killed by SIGKILL (out of memory?)";
  if (child.signal != 0) return fmt::format("killed by signal {} ({})", child.signal, strsignal(child.signal));
  if (!line.empty()) return fmt::format("exit status {}: {}", child.exit_code, line);
  return fmt::format("exit status {}", child.exit_code);
}

}  // namespace qvl::app
