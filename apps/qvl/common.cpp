#include "common.h"

#include <fmt/core.h>
#include <signal.h>

#include <csignal>
#include <iostream>
#include <iterator>

#include "qvl/error.h"

namespace qvl::app {

void add_sampling_options(CLI::App* cmd, SamplingFlags& f) {
  cmd->add_flag("--greedy", f.greedy, "Always take the most likely token (deterministic)");
  cmd->add_option("--temperature", f.temperature, "Sampling temperature (default: generation_config.json)");
  cmd->add_option("--top-k", f.top_k, "Keep the k most likely tokens (0: off)");
  cmd->add_option("--top-p", f.top_p, "Keep the smallest set of tokens with this probability mass");
  cmd->add_option("--repetition-penalty", f.repetition_penalty, "Penalize tokens already in the context (1: off)");
  cmd->add_option("--presence-penalty", f.presence_penalty, "Subtract from tokens already generated (0: off)");
  cmd->add_option("--seed", f.seed, "Random seed for sampling")->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", f.max_new_tokens, "Most tokens to generate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

SamplingOptions make_sampling(const SamplingFlags& f, const GenerationConfig& defaults) {
  SamplingOptions s = SamplingOptions::from_generation_config(defaults);
  if (f.greedy) s.greedy = true;
  if (f.temperature) {
    s.temperature = *f.temperature;
    if (!f.greedy) s.greedy = *f.temperature == 0.0;
  }
  if (f.top_k) s.top_k = *f.top_k;
  if (f.top_p) s.top_p = *f.top_p;
  if (f.repetition_penalty) s.repetition_penalty = *f.repetition_penalty;
  if (f.presence_penalty) s.presence_penalty = *f.presence_penalty;
  s.seed = f.seed;
  s.max_new_tokens = f.max_new_tokens;
  return s;
}

SessionOptions make_session_options(const ModelOptions& o) {
  SessionOptions s;
  s.model_dir = resolve_model_dir(o);
  s.dtype = o.dtype;
  s.lazy = o.load != "eager";
  s.quant = o.quant;
  if (!o.quiet) s.on_note = [](const std::string& note) { fmt::print(stderr, "qvl: {}\n", note); };
  s.max_context = o.max_context;
  s.max_memory_mb = o.max_memory_mb;
  s.threads = o.threads;
  s.min_pixels = o.min_pixels;
  s.max_pixels = o.max_pixels;
  if (o.max_side > 0) s.max_pixels = o.max_side * o.max_side;
  return s;
}

static std::atomic<bool> g_interrupted{false};

static void on_sigint(int) {
  if (g_interrupted.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

void install_interrupt_handler(bool interrupt_blocking_reads) {
  struct sigaction action {};
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = interrupt_blocking_reads ? 0 : SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
}
bool interrupted() { return g_interrupted.load(); }
void clear_interrupt() { g_interrupted = false; }

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

}  // namespace qvl::app
