#include "qvl/serve/metrics.h"

#include <fmt/core.h>

namespace qvl::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i] += 1;
  sum_ += value;
  count_ += 1;
}

std::string Histogram::render(const std::string& name) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
  return out;
}

ServeMetrics::ServeMetrics()
    : ttft_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tokens_per_s_({1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}) {}

void ServeMetrics::request_done(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  requests_by_status_[status] += 1;
}

void ServeMetrics::tokens(int64_t prompt, int64_t completion) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

void ServeMetrics::time_to_first_token(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void ServeMetrics::tokens_per_second(double rate) {
  std::lock_guard<std::mutex> lock(mutex_);
  tokens_per_s_.observe(rate);
}

std::string ServeMetrics::prometheus(int64_t running, int64_t queued) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += "# HELP qvl_requests_total Chat completion requests answered, by HTTP status.\n"
         "# TYPE qvl_requests_total counter\n";
  for (const auto& [status, n] : requests_by_status_) out += fmt::format("qvl_requests_total{{status=\"{}\"}} {}\n", status, n);
  out += fmt::format("# HELP qvl_prompt_tokens_total Prompt tokens prefilled.\n# TYPE qvl_prompt_tokens_total counter\n"
                     "qvl_prompt_tokens_total {}\n",
                     prompt_tokens_);
  out += fmt::format("# HELP qvl_completion_tokens_total Tokens generated.\n# TYPE qvl_completion_tokens_total counter\n"
                     "qvl_completion_tokens_total {}\n",
                     completion_tokens_);
  out += fmt::format("# HELP qvl_requests_running Replies being generated.\n# TYPE qvl_requests_running gauge\n"
                     "qvl_requests_running {}\n",
                     running);
  out += fmt::format("# HELP qvl_requests_queued Requests waiting for a free slot.\n# TYPE qvl_requests_queued gauge\n"
                     "qvl_requests_queued {}\n",
                     queued);
  out += "# HELP qvl_time_to_first_token_seconds From a request's arrival to its first token.\n"
         "# TYPE qvl_time_to_first_token_seconds histogram\n";
  out += ttft_.render("qvl_time_to_first_token_seconds");
  out += "# HELP qvl_decode_tokens_per_second Each reply's generation rate after its first token.\n"
         "# TYPE qvl_decode_tokens_per_second histogram\n";
  out += tokens_per_s_.render("qvl_decode_tokens_per_second");
  return out;
}

}  // namespace qvl::serve
