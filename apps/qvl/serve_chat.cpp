#include "serve_chat.h"

#include <httplib.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "common.h"
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/serve/chat_request.h"
#include "qvl/serve/stop_text.h"

namespace qvl::app {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// One completion in flight, shared by its HTTP thread (which sends) and the
// scheduler's thread (which generates).
struct Job {
  explicit Job(std::vector<std::string> stops) : stop(std::move(stops)) {}
  std::mutex mutex;
  std::condition_variable changed;
  serve::StopText stop;
  std::string unsent;  // text generated and not yet sent (all of it, for a reply sent whole)
  bool started = false;  // some text came
  std::optional<BatchResult> result;
  std::atomic<bool> client_gone{false};
  Clock::time_point arrived = Clock::now();
  Clock::time_point deadline;
};

std::string completion_id() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = "chatcmpl-";
  for (int i = 0; i < 24; ++i) id += hex[rng() % 16];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Model text may end in an incomplete UTF-8 character: replaced, never an exception.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

SamplingOptions sampling_for(const serve::ChatRequest& r, const ChatLimits& limits) {
  SamplingOptions s = limits.defaults;
  if (r.temperature) {
    s.greedy = *r.temperature == 0;
    if (!s.greedy) s.temperature = *r.temperature;
  }
  if (r.top_p) s.top_p = *r.top_p;
  if (r.top_k) s.top_k = *r.top_k;
  if (r.seed) s.seed = *r.seed;
  if (r.max_tokens) s.max_new_tokens = *r.max_tokens;
  s.max_new_tokens = std::min(s.max_new_tokens, limits.max_tokens_cap);
  return s;
}

// Decoded and preprocessed as the session does for `qvl ask` (its limits,
// its preprocessor), here on the HTTP thread so the scheduler only prefills.
std::vector<PatchifiedImage> prepare_images(const Session& session, const serve::ChatRequest& r) {
  std::vector<PatchifiedImage> images;
  for (size_t i = 0; i < r.images.size(); ++i) {
    try {
      const RgbImage rgb = decode_image(r.images[i].data(), r.images[i].size(), "image " + std::to_string(i + 1),
                                        session.image_limits(), session.decode_request());
      images.push_back(preprocess_image(rgb, session.preprocessor_config()));
    } catch (const std::exception& e) {
      throw serve::RequestError(e.what(), "messages", "invalid_image");
    }
  }
  return images;
}

std::string finish_reason(const Job& job) {
  if (job.stop.stopped() || job.result->answer.stop_reason == "eos") return "stop";
  return "length";  // max_tokens, the context's end, the time limit
}

json usage_json(const Answer& a) {
  const int64_t completion = int64_t(a.tokens.size());
  return {{"prompt_tokens", a.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", a.prompt_tokens + completion}};
}

// Tokens count once generated, also for a reply whose client went away.
void record_tokens(serve::ServeMetrics& metrics, const BatchResult& result) {
  if (!result.error.empty()) return;
  const Answer& a = result.answer;
  metrics.tokens(a.prompt_tokens, int64_t(a.tokens.size()));
  if (a.tokens.size() > 1) metrics.tokens_per_second(a.decode_tokens_per_s());
}

// nginx's status for a request whose client closed the connection first.
constexpr int kClientClosed = 499;

// Waits until ready() holds (asked under the job's lock); false, and the
// reply cancelled, when the client goes away meanwhile.
bool wait_while_connected(Job& job, httplib::DataSink& sink, const std::function<bool()>& ready) {
  std::unique_lock<std::mutex> lock(job.mutex);
  while (!job.changed.wait_for(lock, std::chrono::milliseconds(100), ready)) {
    lock.unlock();  // the check may wait for the socket: the scheduler must not wait for it
    const bool connected = sink.is_writable();
    lock.lock();
    if (!connected) {
      job.client_gone = true;
      return false;
    }
  }
  return true;
}

}  // namespace

void send_error(httplib::Response& res, int status, const std::string& message, const std::string& param,
                const std::string& code, const std::string& type) {
  res.status = status;
  const json body = {{"error",
                      {{"message", message},
                       {"type", type},
                       {"param", param.empty() ? json(nullptr) : json(param)},
                       {"code", code.empty() ? json(nullptr) : json(code)}}}};
  res.set_content(dump(body), "application/json");
}

void handle_chat_completion(const ChatContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto refuse = [&](int status, const std::string& message, const std::string& param, const std::string& code,
                    const std::string& type) {
    ctx.metrics->request_done(status);
    if (status == 503) res.set_header("Retry-After", "1");
    send_error(res, status, message, param, code, type);
  };
  if (!ctx.scheduler->ready())
    return refuse(503, "the model is still loading", "", "model_loading", "server_error");
  serve::ChatRequest request;
  std::vector<PatchifiedImage> images;
  try {
    serve::ImagePolicy policy;
    policy.allowed_dirs = ctx.limits.allowed_dirs;
    request = serve::parse_chat_request(req.body, policy);
    try {
      check_prompt_length(request.messages, ctx.limits.max_context);
    } catch (const Error& e) {
      throw serve::RequestError(e.what(), "messages", "context_length_exceeded");
    }
    images = prepare_images(ctx.scheduler->session(), request);
  } catch (const serve::RequestError& e) {
    return refuse(e.status, e.what(), e.param, e.code, "invalid_request_error");
  }

  auto job = std::make_shared<Job>(request.stop);
  job->deadline = job->arrived + std::chrono::milliseconds(int64_t(ctx.limits.request_timeout_s * 1000));
  BatchRequest batch_request;
  batch_request.turn = std::move(request.messages);
  batch_request.images = std::move(images);
  batch_request.sampling = sampling_for(request, ctx.limits);
  batch_request.on_text = [job](const std::string& piece) {
    std::lock_guard<std::mutex> lock(job->mutex);
    job->started = true;
    job->unsent += job->stop.push(piece);
    job->changed.notify_all();
    return !job->stop.stopped();
  };
  batch_request.cancelled = [job, cancel_all = ctx.cancel_all] {
    return job->client_gone || *cancel_all || Clock::now() > job->deadline;
  };
  const ServeScheduler::Submitted submitted =
      ctx.scheduler->submit(std::move(batch_request), [job, metrics = ctx.metrics](BatchResult result) {
        record_tokens(*metrics, result);
        std::lock_guard<std::mutex> lock(job->mutex);
        job->unsent += job->stop.finish();
        job->result = std::move(result);
        job->changed.notify_all();
      });
  if (submitted == ServeScheduler::Submitted::QueueFull)
    return refuse(503, "the server is busy: every slot and queue place is taken; retry later", "", "queue_full",
                  "server_error");
  if (submitted != ServeScheduler::Submitted::Ok)
    return refuse(503, "the server is shutting down", "", "shutting_down", "server_error");

  // Until the first text (or the end): a request that cannot start gets a
  // plain error response, also when it asked for a stream.
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->changed.wait(lock, [&] { return job->started || job->result; });
    if (job->result && !job->result->error.empty()) {
      const bool closing = *ctx.shutting_down;
      const std::string error = job->result->error;
      lock.unlock();
      return refuse(closing ? 503 : 400, error, closing ? "" : "messages", closing ? "shutting_down" : "invalid_prompt",
                    closing ? "server_error" : "invalid_request_error");
    }
  }
  ctx.metrics->time_to_first_token(std::chrono::duration<double>(Clock::now() - job->arrived).count());
  const std::string id = completion_id();
  const int64_t created = unix_now();

  // Both kinds of reply are sent by a content provider on this thread, which
  // can tell while it waits that the client went away.
  const std::string model = ctx.model_id;
  auto released = [job, metrics = ctx.metrics](bool success) {
    if (success) {
      metrics->request_done(200);
    } else {
      job->client_gone = true;
      metrics->request_done(kClientClosed);
    }
  };
  if (!request.stream) {
    res.set_chunked_content_provider(
        "application/json",
        [job, id, created, model](size_t, httplib::DataSink& sink) {
          if (!wait_while_connected(*job, sink, [&] { return bool(job->result); })) return false;
          const json body = {{"id", id},
                             {"object", "chat.completion"},
                             {"created", created},
                             {"model", model},
                             {"choices",
                              {{{"index", 0},
                                {"message", {{"role", "assistant"}, {"content", job->unsent}}},
                                {"finish_reason", finish_reason(*job)}}}},
                             {"usage", usage_json(job->result->answer)}};
          const std::string text = dump(body);
          if (!sink.write(text.data(), text.size())) return false;
          sink.done();
          return true;
        },
        released);
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  auto chunk = [id, created, model](const json& delta, const json& finish, const json& usage = nullptr) {
    json event = {{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", model},
                  {"choices", {{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}}}};
    // The usage, as OpenAI sends it with stream_options.include_usage, in the last chunk.
    if (!usage.is_null()) event["usage"] = usage;
    return "data: " + dump(event) + "\n\n";
  };
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, chunk](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& event) {
          if (sink.write(event.data(), event.size())) return true;
          job->client_gone = true;  // the reply ends at its next step, freeing its slot
          return false;
        };
        if (!send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
        while (true) {
          if (!wait_while_connected(*job, sink, [&] { return !job->unsent.empty() || job->result; })) return false;
          std::string text;
          bool over = false;
          {
            std::lock_guard<std::mutex> lock(job->mutex);
            text.swap(job->unsent);
            over = bool(job->result);
          }
          if (!text.empty() && !send(chunk({{"content", text}}, nullptr))) return false;
          if (over) break;
        }
        if (!send(chunk(json::object(), finish_reason(*job), usage_json(job->result->answer))) ||
            !send("data: [DONE]\n\n"))
          return false;
        sink.done();
        return true;
      },
      released);
}

}  // namespace qvl::app
