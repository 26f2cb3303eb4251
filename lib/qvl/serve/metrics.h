// The server's counters, as Prometheus text (GET /metrics). Thread-safe:
// HTTP threads record into it while another renders it.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace qvl::serve {

// A Prometheus histogram: counts per upper bound, plus the sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The _bucket, _sum and _count lines of metric `name`.
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bound, not cumulative
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServeMetrics {
 public:
  ServeMetrics();
  void request_done(int status);  // one /v1/chat/completions reply, by HTTP status
  void tokens(int64_t prompt, int64_t completion);
  void time_to_first_token(double seconds);
  void tokens_per_second(double rate);  // a reply's decode rate
  // Every metric; running and queued are the scheduler's gauges now.
  std::string prometheus(int64_t running, int64_t queued) const;

 private:
  mutable std::mutex mutex_;
  std::map<int, int64_t> requests_by_status_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  Histogram ttft_, tokens_per_s_;
};

}  // namespace qvl::serve
