#include "qvl/session/serve_scheduler.h"

#include <vector>

namespace qvl {

ServeScheduler::ServeScheduler(Options options) : options_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

ServeScheduler::~ServeScheduler() { shutdown(); }

std::string ServeScheduler::load_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return load_error_;
}

int64_t ServeScheduler::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

int64_t ServeScheduler::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(queue_.size());
}

ServeScheduler::Submitted ServeScheduler::submit(BatchRequest request, Done done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return Submitted::Closed;
  if (!ready_) return Submitted::NotReady;
  // A free slot takes the request at the scheduler's next look; beyond the
  // slots, up to `queue` wait.
  if (int64_t(queue_.size()) >= options_.queue + std::max<int64_t>(0, options_.parallel - running_))
    return Submitted::QueueFull;
  request.tag = next_tag_++;
  done_[request.tag] = std::move(done);
  queue_.push_back(std::move(request));
  wake_.notify_all();
  return Submitted::Ok;
}

void ServeScheduler::close() {
  std::vector<std::pair<uint64_t, Done>> refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    for (const BatchRequest& r : queue_) {
      refused.emplace_back(r.tag, std::move(done_[r.tag]));
      done_.erase(r.tag);
    }
    queue_.clear();
    wake_.notify_all();
  }
  for (auto& [tag, done] : refused) done({tag, Answer{}, "the server is shutting down"});
}

void ServeScheduler::shutdown() {
  close();
  if (thread_.joinable()) thread_.join();
}

std::optional<BatchRequest> ServeScheduler::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (queue_.empty()) return std::nullopt;
  BatchRequest r = std::move(queue_.front());
  queue_.pop_front();
  running_ += 1;
  return r;
}

bool ServeScheduler::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return closed_ || !queue_.empty(); });
  return !queue_.empty();
}

void ServeScheduler::finished(BatchResult result) {
  Done done;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = done_.find(result.tag);
    if (it == done_.end()) return;
    done = std::move(it->second);
    done_.erase(it);
    running_ -= 1;
  }
  done(std::move(result));
}

void ServeScheduler::run() {
  if (options_.on_thread_start) options_.on_thread_start();
  try {
    session_ = std::make_unique<Session>(options_.session);
    if (options_.warm_vision) session_->warm_vision();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    load_error_ = e.what();
    closed_ = true;
    return;
  }
  ready_ = true;
  try {
    session_->serve_batch(options_.parallel, {[this] { return poll(); }, [this] { return wait(); }},
                          [this](BatchResult r) { finished(std::move(r)); }, options_.prefill_chunk);
  } catch (const std::exception& e) {
    // The model failed mid-step: every request still waiting for an answer gets the error.
    std::map<uint64_t, Done> left;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
      left.swap(done_);
      queue_.clear();
      running_ = 0;
    }
    for (auto& [tag, done] : left) done({tag, Answer{}, e.what()});
  }
}

}  // namespace qvl
