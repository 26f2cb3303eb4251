// qvl serve: an OpenAI-compatible HTTP server that keeps the model loaded.
// This file holds the flags, the routes and the process's lifetime (listen,
// load in the background, stop on SIGTERM/SIGINT); serve_chat.cpp answers
// chat completions and lib/qvl/session/serve_scheduler.h runs them.
#include <fmt/core.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "commands.h"
#include "common.h"
#include "qvl/error.h"
#include "qvl/serve/metrics.h"
#include "qvl/session/serve_scheduler.h"
#include "serve_chat.h"
#include "serve_page.h"

namespace qvl::app {
namespace {

struct ServeFlags {
  ModelOptions model;
  SamplingFlags sampling;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;  // else $QVL_API_KEY
  std::vector<std::string> allow_paths;
  int64_t parallel = 4;
  int64_t queue = 16;
  int64_t prefill_chunk = 256;
  int64_t max_body_mb = 20;
  int64_t max_tokens_cap = 4096;
  double request_timeout_s = 600;
  double shutdown_grace_s = 10;
};

volatile std::sig_atomic_t g_stop_signal = 0;  // SIGTERM or SIGINT came

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// Equal strings, in a time that does not depend on where they first differ
// (only on the length), so a key cannot be guessed byte by byte from timings.
bool same_secret(const std::string& given, const std::string& expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < given.size(); ++i) diff |= uint8_t(given[i]) ^ uint8_t(expected[i]);
  return diff == 0;
}

std::string model_id_of(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

const char* status_message(int status) {
  switch (status) {
    case 401: return "a valid API key is required: send 'Authorization: Bearer KEY'";
    case 404: return "no such route";
    case 405: return "method not allowed";
    case 413: return "the request body is too large (qvl serve --max-body-mb)";
    default: return "the request failed";
  }
}

int run_serve(const ServeFlags& f) {
  std::string api_key = f.api_key;
  if (api_key.empty()) {
    if (const char* env = std::getenv("QVL_API_KEY")) api_key = env;
  }
  if (!is_loopback(f.host) && api_key.empty())
    throw Error(fmt::format("refusing to listen on {} without an API key: give --api-key KEY (or $QVL_API_KEY), or "
                            "bind to 127.0.0.1",
                            f.host));

  SessionOptions session_options = make_session_options(f.model);
  const GenerationConfig generation = load_generation_config(session_options.model_dir);

  // SIGTERM and SIGINT only raise a flag, whichever thread takes them (BLAS
  // threads started before this too); the watcher thread below acts on it.
  // A second one ends the process at once, as Ctrl-C usually does.
  struct sigaction action {};
  action.sa_handler = [](int sig) {
    if (g_stop_signal != 0) _exit(128 + sig);
    g_stop_signal = sig;
  };
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client gone mid-reply is a failed write, not the end of the server

  httplib::Server server;
  const size_t http_threads = size_t(f.parallel + f.queue + 4);  // every queued request holds one
  server.new_task_queue = [http_threads] { return new httplib::ThreadPool(http_threads); };
  server.set_payload_max_length(size_t(f.max_body_mb) << 20);
  server.set_keep_alive_timeout(2);
  if (!server.bind_to_port(f.host, f.port))
    throw Error(fmt::format("cannot listen on {}:{}: {}", f.host, f.port, std::strerror(errno)));

  // The model loads on the scheduler's thread while the socket already answers /health.
  ServeScheduler::Options scheduler_options;
  scheduler_options.session = session_options;
  scheduler_options.parallel = f.parallel;
  scheduler_options.queue = f.queue;
  scheduler_options.prefill_chunk = f.prefill_chunk;
  scheduler_options.on_thread_start = [session_options] { configure_threads_for(session_options); };
  ServeScheduler scheduler(scheduler_options);
  serve::ServeMetrics metrics;
  std::atomic<bool> cancel_all{false}, shutting_down{false};

  ChatContext chat;
  chat.scheduler = &scheduler;
  chat.metrics = &metrics;
  chat.model_id = model_id_of(session_options.model_dir);
  chat.limits.defaults = make_sampling(f.sampling, generation);
  chat.limits.max_tokens_cap = f.max_tokens_cap;
  chat.limits.request_timeout_s = f.request_timeout_s;
  chat.limits.allowed_dirs = f.allow_paths;
  chat.limits.max_context = f.model.max_context;
  chat.cancel_all = &cancel_all;
  chat.shutting_down = &shutting_down;

  server.set_pre_routing_handler([&](const httplib::Request& req, httplib::Response& res) {
    if (api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (same_secret(req.get_header_value("Authorization"), "Bearer " + api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, 401, status_message(401), "", "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (413, 404) in OpenAI's error shape.
  server.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = status_message(res.status);
    // httplib caps form-encoded bodies at 8 KB whatever --max-body-mb says:
    // `curl -d` sends that content type unless told otherwise.
    if (res.status == 413 && req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0)
      message = "a form-encoded request body is limited to 8 KB: send it with 'Content-Type: application/json'";
    send_error(res, res.status, message, "", res.status == 413 ? "request_too_large" : "", "invalid_request_error");
    return httplib::Server::HandlerResponse::Handled;
  }));
  // A handler's unexpected exception: a 500 in the same shape, the server goes on.
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
    std::string message = "internal error";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, 500, message, "", "", "server_error");
  });
  server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    handle_chat_completion(chat, req, res);
  });
  server.Get("/v1/models", [&](const httplib::Request&, httplib::Response& res) {
    const nlohmann::json body = {
        {"object", "list"},
        {"data", {{{"id", chat.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "qvl"}}}}};
    res.set_content(body.dump(), "application/json");
  });
  server.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    const bool ready = scheduler.ready();
    res.status = ready ? 200 : 503;
    res.set_content(nlohmann::json{{"status", ready ? "ok" : "loading"}}.dump(), "application/json");
  });
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.prometheus(scheduler.running(), scheduler.queued()), "text/plain; version=0.0.4");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kChatPage, "text/html; charset=utf-8");
  });

  // The first SIGTERM/SIGINT stops the listener; replies still running get
  // the grace period, then are cancelled at their next token. A model that
  // fails to load ends the server too.
  std::atomic<bool> stop_watching{false};
  int exit_code = kOk;
  std::thread watcher([&] {
    bool said_ready = false;
    while (!stop_watching) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!said_ready && scheduler.ready()) {
        said_ready = true;
        if (!f.model.quiet) fmt::print(stderr, "qvl serve: model loaded, ready\n");
      }
      const std::string load_error = scheduler.load_error();
      if (g_stop_signal == 0 && load_error.empty()) continue;
      if (!load_error.empty()) {
        fmt::print(stderr, "qvl: {}\n", load_error);
        exit_code = kError;
      } else if (!f.model.quiet) {
        fmt::print(stderr, "qvl serve: stopping (letting running replies finish for up to {} s)\n", f.shutdown_grace_s);
      }
      shutting_down = true;
      scheduler.close();  // queued requests get 503; running ones go on
      server.stop();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(f.shutdown_grace_s * 1000));
      while (!stop_watching && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      cancel_all = true;
      return;
    }
  });
  if (!f.model.quiet)
    fmt::print(stderr, "qvl serve: listening on http://{}:{} (model {} loading)\n", f.host, f.port, chat.model_id);
  const bool listened = server.listen_after_bind();
  // Every HTTP thread is done; the scheduler ends once its running replies are.
  cancel_all = true;
  scheduler.shutdown();
  stop_watching = true;
  watcher.join();
  if (!listened && !shutting_down) throw Error(fmt::format("the server on {}:{} failed", f.host, f.port));
  return exit_code;
}

}  // namespace

void register_serve(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over HTTP: an OpenAI-compatible /v1/chat/completions, with a chat page at /");
  add_model_options(cmd, f->model);
  add_sampling_options(cmd, f->sampling);
  cmd->add_option("--host", f->host, "Address to listen on (anything but loopback needs --api-key)")
      ->capture_default_str();
  cmd->add_option("--port", f->port, "Port to listen on")->capture_default_str()->check(integer_in(1, 65535));
  cmd->add_option("--api-key", f->api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/* (default: $QVL_API_KEY, else no key)");
  cmd->add_option("--allow-path", f->allow_paths, "Folder whose images requests may name as file:// URLs; repeat for several")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--parallel", f->parallel, "Replies generated at once")->capture_default_str()->check(integer_in(1, 64));
  cmd->add_option("--queue", f->queue, "Requests that may wait for a slot; more get 503")
      ->capture_default_str()
      ->check(integer_in(0, 1024));
  cmd->add_option("--prefill-chunk", f->prefill_chunk,
                  "A new prompt is prefilled this many tokens at a time, between the running replies' steps "
                  "(0: whole)")
      ->capture_default_str()
      ->check(integer_in(0, 1 << 20));
  cmd->add_option("--max-body-mb", f->max_body_mb, "Largest request body in MiB; larger gets 413")
      ->capture_default_str()
      ->check(integer_in(1, 1024));
  cmd->add_option("--max-tokens-cap", f->max_tokens_cap, "A request's max_tokens is lowered to this")
      ->capture_default_str()
      ->check(integer_in(1, 1 << 20));
  cmd->add_option("--request-timeout", f->request_timeout_s, "Seconds a reply may take; then it ends (\"length\")")
      ->capture_default_str()
      ->check(number_in(0, true, 1e9, false));
  cmd->add_option("--shutdown-grace", f->shutdown_grace_s,
                  "Seconds running replies may go on after SIGTERM/SIGINT before they are cancelled")
      ->capture_default_str()
      ->check(number_in(0, false, 3600, false));
  cmd->callback([f, &exit_code] { exit_code = run_serve(*f); });
}

}  // namespace qvl::app
