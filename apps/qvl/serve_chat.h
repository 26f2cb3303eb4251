// qvl serve's chat completions: an OpenAI request turned into a scheduler
// request, and the reply sent back whole or as server-sent events.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "qvl/generate/sampler.h"
#include "qvl/serve/metrics.h"
#include "qvl/session/serve_scheduler.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace qvl::app {

struct ChatLimits {
  SamplingOptions defaults;           // the server's flags: what a request does not say
  int64_t max_tokens_cap = 4096;      // a request's max_tokens is lowered to this
  double request_timeout_s = 600;     // a reply still generating then ends ("length")
  int64_t max_context = 4096;         // text that cannot fit is refused before it is tokenized
  std::vector<std::string> allowed_dirs;  // --allow-path: folders file:// images may come from
};

// What every completion shares: the scheduler, the metrics, the model's name.
struct ChatContext {
  ServeScheduler* scheduler = nullptr;
  serve::ServeMetrics* metrics = nullptr;
  std::string model_id;
  ChatLimits limits;
  std::atomic<bool>* cancel_all = nullptr;  // set at shutdown once the grace period is over
  std::atomic<bool>* shutting_down = nullptr;
};

// POST /v1/chat/completions.
void handle_chat_completion(const ChatContext& ctx, const httplib::Request& req, httplib::Response& res);

// OpenAI's error body: {"error":{"message","type","param","code"}}.
void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param = "",
                const std::string& code = "", const std::string& type = "invalid_request_error");

}  // namespace qvl::app
