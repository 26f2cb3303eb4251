// A server's request scheduler: HTTP threads submit chat requests, one
// thread owns the Session and answers them together (Session::serve_batch),
// so concurrent replies share each decode step. The model loads on that
// thread, after the server is already listening.
//
// No torch types here: the HTTP front end includes it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "qvl/session/session.h"

namespace qvl {

class ServeScheduler {
 public:
  struct Options {
    SessionOptions session;
    int64_t parallel = 4;  // replies generated at once
    int64_t queue = 16;    // requests waiting beyond those
    int64_t prefill_chunk = 0;  // > 0: longer prompts are prefilled in parts of this many tokens (serve_batch)
    std::function<void()> on_thread_start;  // e.g. the process's thread set-up, on the scheduler's thread
    // Load the vision encoder before ready() too, so that the first image
    // does not hold up the replies running beside it.
    bool warm_vision = true;
  };
  using Done = std::function<void(BatchResult)>;
  enum class Submitted { Ok, QueueFull, Closed, NotReady };

  explicit ServeScheduler(Options options);  // starts loading the model
  ~ServeScheduler();
  ServeScheduler(const ServeScheduler&) = delete;
  ServeScheduler& operator=(const ServeScheduler&) = delete;

  bool ready() const { return ready_; }  // the model is loaded
  std::string load_error() const;        // why loading failed, "" while loading or loaded
  // Only once ready(): its const queries (configs, image limits) are safe from any thread.
  const Session& session() const { return *session_; }

  // Queues a request (its tag is replaced); `done` gets its result on the
  // scheduler's thread, or at once with an error if the request never runs.
  Submitted submit(BatchRequest request, Done done);
  // Takes no more requests and answers the queued ones with an error; the
  // running ones go on.
  void close();
  // close(), then waits until the running replies are over (cancel them to hurry it).
  void shutdown();

  int64_t running() const;
  int64_t queued() const;

 private:
  void run();
  std::optional<BatchRequest> poll();
  bool wait();
  void finished(BatchResult result);

  Options options_;
  std::unique_ptr<Session> session_;
  std::atomic<bool> ready_{false};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::string load_error_;
  bool closed_ = false;
  std::deque<BatchRequest> queue_;
  std::map<uint64_t, Done> done_;  // by tag, queued and running
  uint64_t next_tag_ = 1;
  int64_t running_ = 0;
  std::thread thread_;
};

}  // namespace qvl
