#include "common.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <signal.h>


#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>

#include "qvl/error.h"
#include "qvl/image/image_budget.h"
#include "qvl/session/threads.h"
#include "qvl/text/chat.h"
#include "qvl/io/paths.h"

namespace qvl::app {

namespace {

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// Whole numbers only: "12", "-3"; not "1e3", "0x10", "12abc" or "".
bool parse_integer(const std::string& text, int64_t* out) {
  const std::string s = trimmed(text);
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

}  // namespace

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        int64_t v = 0;
        if (!parse_integer(value, &v)) return "'" + value + "' is not a whole number";
        if (v < lo) return fmt::format("must be ≥ {} (got {})", lo, value);
        if (v > hi) return fmt::format("must be ≤ {} (got {})", hi, value);
        return "";
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const std::string s = trimmed(value);
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "'" + value + "' is not a whole number ≥ 0";
        errno = 0;
        std::strtoull(s.c_str(), nullptr, 10);
        if (errno == ERANGE) return "'" + value + "' is too large (at most 18446744073709551615)";
        return "";
      },
      "UINT");
}

CLI::Validator number_in(double lo, bool lo_open, double hi, bool hi_open) {
  auto bound = [](double v) { return std::isinf(v) ? std::string() : fmt::format("{}", v); };
  std::string range;
  if (!std::isinf(lo) && !std::isinf(hi))
    range = fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", bound(lo), bound(hi), hi_open ? ")" : "]");
  else if (!std::isinf(lo))
    range = fmt::format("{} {}", lo_open ? ">" : "≥", bound(lo));
  else if (!std::isinf(hi))
    range = fmt::format("{} {}", hi_open ? "<" : "≤", bound(hi));
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        const std::string s = trimmed(value);
        errno = 0;
        char* end = nullptr;
        const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
          return "'" + value + "' is not a finite number";
        const bool below = lo_open ? !(v > lo) : !(v >= lo);
        const bool above = hi_open ? !(v < hi) : !(v <= hi);
        if (below || above) return fmt::format("must be {} (got {})", range, value);
        return "";
      },
      range.empty() ? "NUMBER" : "NUMBER " + range);
}

CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t v = 0;
        if (!parse_integer(value, &v) || v < 0) return "'" + value + "' is not a whole number ≥ 0 (0: every core)";
        const int cores = usable_cores();
        // More threads than cores only make them wait for each other; thousands exhaust memory.
        if (v > int64_t(4) * cores)
          return fmt::format("{} is more than 4 × the {} core{} this process may use (at most {})", value, cores,
                             cores == 1 ? "" : "s", 4 * cores);
        return "";
      },
      "INT (0: every core)");
}

void add_sampling_options(CLI::App* cmd, SamplingFlags& f) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  cmd->add_flag("--greedy", f.greedy, "Always take the most likely token (deterministic)");
  cmd->add_option("--temperature", f.temperature, "Sampling temperature; 0: greedy (default: generation_config.json)")
      ->check(number_in(0, false, kInf, true));
  cmd->add_option("--top-k", f.top_k, "Keep the k most likely tokens (0: off)")
      ->check(integer_in(0, std::numeric_limits<int32_t>::max()));
  cmd->add_option("--top-p", f.top_p, "Keep the smallest set of tokens with this probability mass")
      ->check(number_in(0, true, 1, false));
  cmd->add_option("--repetition-penalty", f.repetition_penalty, "Penalize tokens already in the context (1: off)")
      ->check(number_in(0, true, kInf, true));
  cmd->add_option("--presence-penalty", f.presence_penalty, "Subtract from tokens already generated (0: off)")
      ->check(number_in(-kInf, true, kInf, true));
  cmd->add_option("--seed", f.seed, "Random seed for sampling")->check(unsigned_integer())->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", f.max_new_tokens, "Most tokens to generate")
      ->check(integer_in(1, std::numeric_limits<int32_t>::max()))
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

void configure_threads_for(const SessionOptions& options) { configure_threads(options.threads, options.dtype); }

SessionOptions make_session_options(const ModelOptions& o) {
  SessionOptions s;
  s.model_dir = resolve_model_dir(o);
  s.dtype = parse_compute_dtype(o.dtype);
  s.lazy = o.load != "eager";
  s.quant = parse_weight_quant(o.quant);
  if (!o.quiet) s.on_note = [](const std::string& note) { fmt::print(stderr, "qvl: {}\n", note); };
  s.max_context = o.max_context;
  s.max_memory_mb = o.max_memory_mb;
  s.threads = o.threads;
  s.adapt_threads = o.threads == 0;  // the user's count is kept as it is
  const ImageBounds bounds = image_bounds(o);
  s.min_pixels = bounds.min_pixels;
  s.max_pixels = bounds.max_pixels;
  s.max_image_tokens = bounds.max_image_tokens;
  s.max_image_pixels = o.max_image_pixels;
  s.image_page = o.page;
  s.pdf_dpi = o.dpi;
  s.page_timeout_s = o.page_timeout_s;
  return s;
}

DecodeRequest decode_request_for(const SessionOptions& o) {
  DecodeRequest request;
  request.page = o.image_page;
  request.pdf_dpi = o.pdf_dpi;
  const PreprocessorConfig cfg = apply_image_bounds(load_preprocessor_config(o.model_dir),
                                                    {o.min_pixels, o.max_pixels, o.max_image_tokens});
  request.target_max_pixels = cfg.max_pixels;
  return request;
}

ImageLimits image_limits_for(const SessionOptions& o) {
  ImageLimits limits;
  limits.max_pixels = o.max_image_pixels;
  limits.page_timeout_s = o.page_timeout_s;
  return limits;
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

void check_prompt_length(const std::vector<Message>& messages, int64_t max_context) {
  const int64_t bytes = text_bytes(messages);
  const int64_t at_least = bytes / kMaxBytesPerToken;
  if (at_least + 1 > max_context)
    throw Error(fmt::format("the text is {} bytes, at least {} tokens: more than the context limit of {} tokens "
                            "(--max-context); shorten it",
                            bytes, at_least, max_context));
}

std::string image_tokens_note(const Answer& a, const ModelConfig& cfg) {
  if (a.grids.empty()) return "";
  std::vector<int64_t> tokens;
  for (const ImageGrid& g : a.grids) tokens.push_back(g.tokens(cfg.vision.spatial_merge_size));
  if (tokens.size() == 1) return fmt::format(" ({} image tokens)", tokens[0]);
  return fmt::format(" ({} images: {} image tokens)", tokens.size(), fmt::join(tokens, " + "));
}

std::vector<uint8_t> read_stdin_image(int64_t max_bytes) {
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  for (;;) {
    const size_t n = std::fread(buffer, 1, sizeof buffer, stdin);
    if (n > 0) {
      if (int64_t(bytes.size() + n) > max_bytes)
        throw Error(fmt::format("stdin: more than {} bytes, over the image file limit", max_bytes));
      bytes.insert(bytes.end(), buffer, buffer + n);
    }
    if (n < sizeof buffer) {
      if (std::ferror(stdin)) throw Error(fmt::format("stdin: read failed: {}", std::strerror(errno)));
      break;
    }
  }
  if (bytes.empty()) throw Error("stdin: no image bytes (--image - reads the image from stdin)");
  return bytes;
}

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// --- Options every model command shares, and where the model folder is.

static const char* kDefaultModelDir = "models/Qwen3-VL-2B-Instruct";

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--model", o.model_dir, "Model folder (default: $QVL_MODEL or models/Qwen3-VL-2B-Instruct)");
  cmd->add_option("--threads", o.threads,
                  "Worker threads, kept as given (default: all cores, and decoding uses fewer while other "
                  "processes keep them busy; at most 4 x the cores)")
      ->check(thread_count());
  cmd->add_option("--dtype", o.dtype, "Compute dtype (bf16 is fast; f32 matches the reference exactly)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--load", o.load, "lazy: touch weights as layers first run; eager: load all first")
      ->check(CLI::IsMember({"lazy", "eager"}))
      ->capture_default_str();
  cmd->add_option("--quant", o.quant,
                  "Decoder weights: none (as stored), int8 or int4 (quantized once, cached; faster decoding, "
                  "int4 fastest and least exact; both also encode images, and int8 also prefills long prompts, "
                  "with int8 matrix products: ~1.5-2x bf16 on AVX-512, ~2.5-3x on AVX2 CPUs with AVX-VNNI)")
      ->check(CLI::IsMember({"none", "int8", "int4"}))
      ->capture_default_str();
  cmd->add_option("--max-context", o.max_context, "Context limit in tokens (KV cache size)")
      ->check(integer_in(1, int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--max-memory", o.max_memory_mb,
                  "Refuse to start (or to encode an image) when the estimate exceeds this many MB "
                  "(default: the memory available now)")
      ->check(integer_in(0, int64_t(1) << 40));
  // The same bound as preprocessor_config.json's (model/config.cpp): 2^28 pixels, 16384 squared.
  cmd->add_option("--min-pixels", o.min_pixels, "Smallest resized image area (default: preprocessor_config.json)")
      ->check(integer_in(1, int64_t(1) << 28));
  cmd->add_option("--max-pixels", o.max_pixels, "Largest resized image area (default: preprocessor_config.json)")
      ->check(integer_in(1, int64_t(1) << 28));
  cmd->add_option("--max-side", o.max_side, "Shortcut: largest resized area is max-side squared")
      ->check(integer_in(1, 16384));
  cmd->add_option("--max-image-tokens", o.max_image_tokens,
                  fmt::format("Resize each image to at most N image tokens of 32x32 pixels (default: {}, unless "
                              "--max-pixels or --max-side is given; the tightest bound wins)",
                              o.default_image_tokens))
      ->check(integer_in(1, int64_t(1) << 18));
  cmd->add_option("--max-image-pixels", o.max_image_pixels,
                  "Refuse an image that decodes to more pixels than this (big JPEGs first decode at 1/2, 1/4 or 1/8 "
                  "scale toward the resized size)")
      ->check(integer_in(1, int64_t(1) << 36))
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "Print only results");
  cmd->add_flag("-v,--verbose", o.verbose, "Print timings and counters on stderr");
}

void add_page_options(CLI::App* cmd, int* page, int* dpi, double* page_timeout_s) {
  if (page)
    cmd->add_option("--page", *page, "Page of a PDF or multi-page TIFF to read (1-based)")
        ->check(integer_in(1, 1'000'000))
        ->capture_default_str();
  cmd->add_option("--dpi", *dpi, fmt::format("Resolution PDF pages are rendered at (default {})", kDefaultPdfDpi))
      ->check(integer_in(10, 1200));
  cmd->add_option("--page-timeout", *page_timeout_s,
                  "Seconds a PDF page may take to render before it is an error (0: no limit)")
      ->envname("QVL_PAGE_TIMEOUT")
      ->check(number_in(0, false, 86400, false))
      ->capture_default_str();
}

ImageBounds image_bounds(const ModelOptions& o) {
  ImageBounds b{o.min_pixels, o.max_pixels, o.max_image_tokens};
  if (o.max_side > 0 && (b.max_pixels == 0 || o.max_side * o.max_side < b.max_pixels))
    b.max_pixels = o.max_side * o.max_side;
  // The default budget stands in only when no upper bound was given.
  if (b.max_image_tokens == 0 && o.max_pixels == 0 && o.max_side == 0) b.max_image_tokens = o.default_image_tokens;
  return b;
}

CLI::Validator existing_file_or_stdin() {
  return CLI::Validator(
      [](std::string& path) -> std::string { return path == "-" ? "" : CLI::ExistingFile(path); }, "FILE or -");
}

std::string resolve_model_dir_for_files(const std::string& flag_value) {
  std::string dir = flag_value;
  if (dir.empty()) {
    const char* env = std::getenv("QVL_MODEL");
    dir = env && *env ? env : kDefaultModelDir;
  }
  if (path_exists(dir) && !is_directory(dir))
    throw Error(fmt::format("model folder '{}' is not a folder (a file of that name exists): pass --model DIR or set "
                            "QVL_MODEL to the model's folder",
                            dir));
  if (!is_directory(dir))
    throw Error(fmt::format(
        "model folder '{}' not found. Download it with:  huggingface-cli download Qwen/Qwen3-VL-2B-Instruct "
        "--local-dir {}   (or pass --model DIR / set QVL_MODEL)",
        dir, kDefaultModelDir));
  return dir;
}

std::string resolve_model_dir(const ModelOptions& opts) {
  std::string dir = resolve_model_dir_for_files(opts.model_dir);
  for (const char* f : {"config.json", "tokenizer.json"})
    if (!is_regular_file(dir + "/" + f))
      throw Error(fmt::format("{}/{} is missing: the model folder is incomplete (download it again with "
                              "huggingface-cli download Qwen/Qwen3-VL-2B-Instruct --local-dir {})",
                              dir, f, dir));
  if (!is_regular_file(dir + "/model.safetensors") && !is_regular_file(dir + "/model.safetensors.index.json"))
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir));
  return dir;
}

}  // namespace qvl::app
