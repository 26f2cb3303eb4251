// qvl bench: compares load modes, dtypes and weight quantizations on one
// question. Every measurement runs in a fresh process (the hidden subcommand
// bench-run), so load time and peak memory are those of a real first start.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "bench_machine.h"
#include "bench_process.h"
#include "bench_report.h"
#include "commands.h"
#include "common.h"
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/kernels/cpu.h"
#include "qvl/model/model_cost.h"
#include "qvl/session/threads.h"
#include "qvl/text/chat.h"

namespace qvl::app {
namespace {

// Weight quantizations qvl can run. Adding one is a line here, plus passing
// it on to SessionOptions in run_bench_child.
const std::vector<std::string> kSupportedQuants = {"none", "int8", "int4"};

// Fixed questions of about twenty words, so runs are comparable across builds.
const char* kImageQuestion =
    "Describe this picture in detail: the main objects, their colours and positions, any text you can read, and what "
    "is happening.";
const char* kTextQuestion =
    "Explain in a few sentences how a camera lens focuses light onto a sensor, and why a wider aperture gives a "
    "shallower depth of field.";

struct BenchFlags {
  ModelOptions model;  // its single dtype/load are replaced by the lists below
  std::vector<std::string> images;
  std::string prompt;
  std::vector<std::string> loads, dtypes, quants;
  int repeat = 3;
  int64_t max_new_tokens = 32;
  int64_t batch = 1;
  bool json = false;
  int contend = 0;      // busy-loop processes beside each run
  bool probe = true;    // measure the machine's ceilings first
};

// What the parent passes to one bench-run child.
struct RunFlags {
  ModelOptions model;
  std::vector<std::string> images;
  std::string prompt;
  std::string quant = "none";
  int64_t max_new_tokens = 32;
  int64_t batch = 1;
  int64_t spawned_at_ns = 0;  // parent's monotonic_ns() just before starting this process
};

CLI::Validator supported_quant() {
  return CLI::Validator(
      [](std::string& quant) -> std::string {
        if (std::find(kSupportedQuants.begin(), kSupportedQuants.end(), quant) != kSupportedQuants.end()) return "";
        return fmt::format("weight quantization '{}' is not supported (supported: {})", quant,
                           fmt::join(kSupportedQuants, ", "));
      },
      // In IsMember's form, "{none,int8,int4}": the man page and completions read the values from it.
      fmt::format("{{{}}}", fmt::join(kSupportedQuants, ",")));
}

std::vector<Message> question(const std::vector<std::string>& images, const std::string& prompt) {
  Message user{"user", {}};
  for (const auto& image : images) user.parts.push_back({ContentPart::Kind::Image, "", image});
  user.parts.push_back({ContentPart::Kind::Text, prompt, ""});
  return {user};
}

double seconds_between(int64_t start_ns, int64_t end_ns) { return double(end_ns - start_ns) / 1e9; }

// The child: load, answer once, print one JSON line of measurements.
int run_bench_child(const RunFlags& f) {
  const std::vector<Message> turn = question(f.images, f.prompt);
  SessionOptions options = make_session_options(f.model);
  options.quant = parse_weight_quant(f.quant);
  configure_threads_for(options);
  Session session(options);
  const int64_t ready_ns = monotonic_ns();
  // The vision encoder is made (module, int8 cache) before the question,
  // so vision_s measures encoding only.
  double vision_load_s = 0;
  if (!f.images.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    session.warm_vision();
    vision_load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  SamplingOptions sampling;  // plain greedy: no penalties to time
  sampling.greedy = true;
  sampling.max_new_tokens = f.max_new_tokens;
  sampling.ignore_eos = true;
  const Answer a = session.ask(turn, sampling);
  const int64_t peak_rss_one = peak_rss_mb();
  const SessionStats after_ask = session.stats();
  nlohmann::json steps_by_threads = nlohmann::json::object();
  for (const auto& [threads, steps] : after_ask.decode_steps_by_threads) steps_by_threads[std::to_string(threads)] = steps;
  nlohmann::json run = {
      {"mode", f.model.load},
      {"dtype", f.model.dtype},
      {"quant", f.quant},
      {"isa", kernels::isa_name(kernels::active_isa())},
      {"load_s", seconds_between(f.spawned_at_ns, ready_ns)},
      {"session_load_s", session.load_seconds()},
      {"vision_load_s", vision_load_s},
      {"peak_rss_mb", peak_rss_one},
      {"image_s", a.timings.image_s},
      {"vision_s", a.timings.vision_s},
      {"prompt_tokens", a.prompt_tokens},
      {"prefill_s", a.timings.prefill_s},
      {"prefill_tok_s", a.prefill_tokens_per_s()},
      {"generated_tokens", a.tokens.size()},
      {"decode_s", a.timings.decode_s},
      {"decode_tok_s", a.decode_tokens_per_s()},
      {"ttft_s", a.timings.ttft_s},
      {"stop_reason", a.stop_reason},
      // How many threads the decode steps ran on (session/session.h): adapt
      // is false with --threads, in float32 and on one core.
      {"decode_threads",
       {{"adapt", after_ask.threads_adapt},
        {"steps", steps_by_threads},
        {"probes", after_ask.thread_probes},
        {"switches", after_ask.thread_switches}}},
  };
  // The work behind the figures (model/model_cost.h), for the efficiency fields.
  const ModelConfig& cfg = session.config();
  std::vector<int64_t> patches;
  for (const ImageGrid& g : a.grids) patches.push_back(g.patches());
  run["decode_weight_bytes"] = decode_weight_bytes_per_token(cfg.text, options.dtype, options.quant);
  run["prefill_flops"] = prefill_flops(cfg.text, a.prompt_tokens);
  run["vision_flops"] = vision_flops(cfg.vision, patches);
  if (f.batch > 1) {
    // The same question as `batch` independent requests decoded together (the
    // image's features come from the cache: this times prefill and decode).
    std::vector<PatchifiedImage> images;
    for (const std::string& path : f.images)
      images.push_back(preprocess_image(decode_image_file(path, session.image_limits(), session.decode_request()),
                                        session.preprocessor_config()));
    const SessionStats before = session.stats();
    int64_t remaining = f.batch;
    session.ask_batch(
        f.batch,
        [&]() -> std::optional<BatchRequest> {
          if (remaining-- <= 0) return std::nullopt;
          BatchRequest req;
          req.turn = turn;
          req.images = images;
          return req;
        },
        sampling, [](BatchResult r) {
          if (!r.error.empty()) throw Error(r.error);
        });
    const SessionStats after = session.stats();
    run["batch"] = f.batch;
    run["batch_decode_tok_s"] = double(after.decoded_tokens - before.decoded_tokens) / (after.decode_s - before.decode_s);
    run["batch_peak_rss_mb"] = after.peak_rss_mb;
  }
  fmt::print("{}\n", run.dump());
  return kOk;
}

std::vector<std::string> child_args(const BenchFlags& f, const std::string& model_dir, const std::string& prompt,
                                    const BenchRow& row) {
  std::vector<std::string> args = {"bench-run", "--model", model_dir, "--load", row.mode, "--dtype", row.dtype,
                                   "--quant", row.quant, "--prompt", prompt};
  args.insert(args.end(), {"--max-new-tokens", std::to_string(f.max_new_tokens)});
  args.insert(args.end(), {"--max-context", std::to_string(f.model.max_context)});
  if (f.batch > 1) args.insert(args.end(), {"--batch", std::to_string(f.batch)});
  if (f.model.threads > 0) args.insert(args.end(), {"--threads", std::to_string(f.model.threads)});
  if (f.model.min_pixels > 0) args.insert(args.end(), {"--min-pixels", std::to_string(f.model.min_pixels)});
  if (f.model.max_pixels > 0) args.insert(args.end(), {"--max-pixels", std::to_string(f.model.max_pixels)});
  if (f.model.max_side > 0) args.insert(args.end(), {"--max-side", std::to_string(f.model.max_side)});
  if (f.model.max_image_tokens > 0)
    args.insert(args.end(), {"--max-image-tokens", std::to_string(f.model.max_image_tokens)});
  args.insert(args.end(), {"--max-image-pixels", std::to_string(f.model.max_image_pixels)});
  for (const std::string& image : f.images) args.insert(args.end(), {"--image", image});
  return args;
}

nlohmann::json parse_run(const ChildResult& child, const BenchRow& row) {
  std::string out = child.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  const size_t newline = out.rfind('\n');
  const std::string last_line = newline == std::string::npos ? out : out.substr(newline + 1);
  nlohmann::json run = nlohmann::json::parse(last_line, nullptr, /*allow_exceptions=*/false);
  if (!run.is_object())
    throw Error(fmt::format("bench run {} {} {} printed no JSON result (got '{}')", row.mode, row.dtype, row.quant,
                            last_line));
  return run;
}

std::vector<std::string> or_default(const std::vector<std::string>& chosen, const std::vector<std::string>& fallback) {
  return chosen.empty() ? fallback : chosen;
}

int run_bench(const BenchFlags& f) {
  const std::string model_dir = resolve_model_dir(f.model);
  const std::string prompt = !f.prompt.empty() ? f.prompt : f.images.empty() ? kTextQuestion : kImageQuestion;
  std::vector<BenchRow> rows;
  for (const std::string& mode : or_default(f.loads, {"lazy", "eager"}))
    for (const std::string& dtype : or_default(f.dtypes, {"bf16"}))
      for (const std::string& quant : or_default(f.quants, kSupportedQuants)) rows.push_back({mode, dtype, quant, {}});

  const bool progress = !f.model.quiet;
  // The machine's ceilings, measured before the runs (and without contenders).
  configure_threads(f.model.threads, ComputeDtype::BF16);
  if (progress && f.probe) fmt::print(stderr, "bench: measuring the machine (--no-probe skips this)\n");
  const nlohmann::json machine = machine_json(f.probe, model_dir);
  if (progress) fmt::print(stderr, "bench: {}\n", machine_line(machine));
  if (progress)
    fmt::print(stderr, "bench: {} configuration{} x {} run{}, {} image{}, {} new tokens, question: \"{}\"\n",
               rows.size(), rows.size() == 1 ? "" : "s", f.repeat, f.repeat == 1 ? "" : "s", f.images.size(),
               f.images.size() == 1 ? "" : "s", f.max_new_tokens, prompt);
  // Repetitions interleave the configurations, so a warming file cache or a
  // busy neighbour does not favour one of them.
  const size_t total = rows.size() * size_t(f.repeat);
  size_t done = 0;
  for (int rep = 0; rep < f.repeat; ++rep) {
    for (BenchRow& row : rows) {
      std::vector<std::string> args = child_args(f, model_dir, prompt, row);
      if (f.model.verbose) fmt::print(stderr, "bench: qvl {}\n", fmt::join(args, " "));
      args.insert(args.end(), {"--spawned-at-ns", std::to_string(monotonic_ns())});
      const double load_before = load_average_1m();
      ChildResult child;
      {
        BusyLoops contenders(f.contend);  // stopped as soon as the run ends, or throws
        child = run_self(args);
      }
      const double load_after = load_average_1m();
      if (!child.ok())
        throw Error(fmt::format("bench run {} {} {} failed: {}", row.mode, row.dtype, row.quant,
                                failure_reason(child)));
      row.runs.push_back(parse_run(child, row));
      row.runs.back()["contenders"] = f.contend;
      row.runs.back()["load_avg_before"] = load_before;
      row.runs.back()["load_avg_after"] = load_after;
      const nlohmann::json& r = row.runs.back();
      ++done;
      if (progress) {
        std::string batch;
        if (r.contains("batch_decode_tok_s"))
          batch = fmt::format(", batch of {} decode {:.2f} tok/s", f.batch, r["batch_decode_tok_s"].get<double>());
        fmt::print(stderr,
                   "bench: [{}/{}] {} {} {}: ready {:.3f} s, vision {:.3f} s, prefill {:.1f} tok/s, decode {:.2f} "
                   "tok/s, ttft {:.3f} s, peak RSS {} MB{}\n",
                   done, total, row.mode, row.dtype, row.quant, r["load_s"].get<double>(),
                   r["vision_s"].get<double>(), r["prefill_tok_s"].get<double>(), r["decode_tok_s"].get<double>(),
                   r["ttft_s"].get<double>(), r["peak_rss_mb"].get<int64_t>(), batch);
      }
    }
  }

  if (f.json) {
    fmt::print("{}\n", bench_json(rows, machine).dump());
  } else {
    fmt::print("{}", bench_table(rows, machine));
    fmt::print("median (min) of {} run{} each in a fresh process{}; load_s: process start to model ready; "
               "ttft_s: question to first token\nkernels: {}\nmachine: {}\n",
               f.repeat, f.repeat == 1 ? "" : "s",
               f.contend > 0 ? fmt::format(", beside {} busy-loop process{}", f.contend, f.contend == 1 ? "" : "es")
                             : "",
               kernels::isa_description(), machine_line(machine));
  }
  return kOk;
}

void register_bench_run(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand("bench-run", "One qvl bench measurement in this process (internal)");
  cmd->group("");  // hidden from --help: only qvl bench starts it
  add_model_options(cmd, f->model);
  cmd->add_option("--image", f->images)->allow_extra_args(false)->check(CLI::ExistingFile);
  cmd->add_option("--prompt", f->prompt)->required();
  cmd->remove_option(cmd->get_option("--quant"));  // add_model_options' one: this list is checked against bench's
  cmd->add_option("--quant", f->quant)->check(supported_quant());
  cmd->add_option("--max-new-tokens", f->max_new_tokens)->check(integer_in(1, int64_t(1) << 20));
  cmd->add_option("--batch", f->batch)->check(CLI::Range(int64_t(1), int64_t(64)));
  cmd->add_option("--spawned-at-ns", f->spawned_at_ns)->required();
  cmd->callback([f, &exit_code] { exit_code = run_bench_child(*f); });
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure load modes, dtypes and weight quantizations: load time, peak memory, vision, prefill and decode speed, "
      "time to first token (each run in a fresh process)");
  add_model_options(cmd, f->model);
  // Here --load and --dtype take lists: drop the single-value versions.
  cmd->remove_option(cmd->get_option("--load"));
  cmd->remove_option(cmd->get_option("--dtype"));
  cmd->remove_option(cmd->get_option("--quant"));
  cmd->add_option("--load", f->loads, "Load modes to compare, comma-separated (default: lazy,eager)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::IsMember({"lazy", "eager"}));
  cmd->add_option("--dtype", f->dtypes, "Compute dtypes to compare, comma-separated (default: bf16)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--quant", f->quants,
                  fmt::format("Weight quantizations to compare, comma-separated (default and supported: {})",
                              fmt::join(kSupportedQuants, ",")))
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(supported_quant());
  cmd->add_option("-i,--image", f->images, "Image file asked about; repeat for several (default: none, a text-only question)")
      ->allow_extra_args(false)
      ->check(CLI::ExistingFile);
  cmd->add_option("--prompt", f->prompt, "The question (default: a fixed ~20-word question, about the image if any)");
  cmd->add_option("--repeat", f->repeat, "Runs per configuration; the table shows median and min")
      ->check(integer_in(1, 1000))
      ->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", f->max_new_tokens,
                  "Tokens generated per run, greedy, end-of-text ignored so every run decodes the same count")
      ->check(CLI::Range(int64_t(2), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--batch", f->batch,
                  "Also decode this many copies of the question together (as qvl ocr --batch does) and report "
                  "batch_decode_tok_s, the tokens/s of all of them")
      ->check(CLI::Range(int64_t(1), int64_t(64)))
      ->capture_default_str();
  cmd->add_option("--contend", f->contend,
                  "Run each measurement beside N CPU-bound busy-loop processes (killed when the run ends): "
                  "qvl's speed on a machine shared with other work")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_flag("!--no-probe", f->probe,
                "Skip the machine probe (memory bandwidth, bf16 GEMM and int8 throughput, ~3 s) and the "
                "efficiency figures");
  cmd->add_flag("--json", f->json, "Print a JSON array (one object per configuration, with every run) instead of the table");
  cmd->callback([f, &exit_code] { exit_code = run_bench(*f); });
  register_bench_run(app, exit_code);
}

}  // namespace qvl::app
