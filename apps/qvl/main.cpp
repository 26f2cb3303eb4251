// qvl: ask questions about images with Qwen3-VL on a CPU.
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "qvl/error.h"
#include "qvl/kernels/cpu.h"

namespace qvl::app {

static const char* kDefaultModelDir = "models/Qwen3-VL-2B-Instruct";

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--model", o.model_dir, "Model folder (default: $QVL_MODEL or models/Qwen3-VL-2B-Instruct)");
  cmd->add_option("--threads", o.threads, "Worker threads (default: all cores; at most 4 x the cores)")
      ->check(thread_count());
  cmd->add_option("--dtype", o.dtype, "Compute dtype (bf16 is fast; f32 matches the reference exactly)")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--load", o.load, "lazy: touch weights as layers first run; eager: load all first")
      ->check(CLI::IsMember({"lazy", "eager"}))
      ->capture_default_str();
  cmd->add_option("--quant", o.quant, "Decoder weights: none (as stored) or int8 (quantized once, cached; faster decoding)")
      ->check(CLI::IsMember({"none", "int8"}))
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

void add_page_options(CLI::App* cmd, int* page, int* dpi) {
  if (page)
    cmd->add_option("--page", *page, "Page of a PDF or multi-page TIFF to read (1-based)")
        ->check(integer_in(1, 1'000'000))
        ->capture_default_str();
  cmd->add_option("--dpi", *dpi, fmt::format("Resolution PDF pages are rendered at (default {})", kDefaultPdfDpi))
      ->check(integer_in(10, 1200));
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

static bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
static bool is_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string resolve_model_dir_for_files(const std::string& flag_value) {
  std::string dir = flag_value;
  if (dir.empty()) {
    const char* env = std::getenv("QVL_MODEL");
    dir = env && *env ? env : kDefaultModelDir;
  }
  if (!is_dir(dir))
    throw Error(fmt::format(
        "model folder '{}' not found. Download it with:  huggingface-cli download Qwen/Qwen3-VL-2B-Instruct "
        "--local-dir {}   (or pass --model DIR / set QVL_MODEL)",
        dir, kDefaultModelDir));
  return dir;
}

std::string resolve_model_dir(const ModelOptions& opts) {
  std::string dir = resolve_model_dir_for_files(opts.model_dir);
  for (const char* f : {"config.json", "tokenizer.json"})
    if (!is_file(dir + "/" + f))
      throw Error(fmt::format("{}/{} is missing: the model folder is incomplete (download it again with "
                              "huggingface-cli download Qwen/Qwen3-VL-2B-Instruct --local-dir {})",
                              dir, f, dir));
  if (!is_file(dir + "/model.safetensors") && !is_file(dir + "/model.safetensors.index.json"))
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir));
  return dir;
}

}  // namespace qvl::app

// A float32 run uses OpenBLAS's own threads beside libgomp's (ATen, oneDNN,
// our kernels). libgomp's threads spin-wait after each parallel region and
// take the cores OpenBLAS needs: on the 2B model f32 prefill ran 7.7 tok/s
// with spinning, 18 without. bf16 runs barely touch OpenBLAS and decode faster
// with spinning. libgomp reads its wait policy once, at start-up, so a
// float32 run restarts itself once with OMP_WAIT_POLICY=PASSIVE, unless the
// user chose a policy.
static void restart_f32_runs_with_passive_openmp(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  bool f32 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--dtype=f32" || (arg == "--dtype" && i + 1 < argc && std::string(argv[i + 1]) == "f32")) f32 = true;
  }
  if (!f32) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

int main(int argc, char** argv) {
  using namespace qvl::app;
  restart_f32_runs_with_passive_openmp(argc, argv);
  CLI::App app{"qvl - ask Qwen3-VL about images, on a CPU"};
  app.require_subcommand(1);
  // The CPU tier is chosen once, here, so a bad QVL_ISA is reported before any work.
  std::string tier;
  try {
    tier = qvl::kernels::isa_description();
  } catch (const qvl::Error& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return kError;
  }
  app.set_version_flag("--version", fmt::format("qvl {}\nkernels: {}", QVL_VERSION, tier));
  int exit_code = kOk;
  register_tokenize(app, exit_code);
  register_preprocess(app, exit_code);
  register_ask(app, exit_code);
  register_synth(app, exit_code);
  register_export(app, exit_code);
  register_ocr(app, exit_code);
  register_chat(app, exit_code);
  register_bench(app, exit_code);
  // `qvl help [COMMAND]` and `qvl version` are what people type: the flags they mean.
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() >= 2 && args[1] == "help") {
    args.erase(args.begin() + 1);
    args.push_back("--help");
  } else if (args.size() == 2 && args[1] == "version") {
    args[1] = "--version";
  }
  std::vector<char*> arg_pointers;
  for (std::string& a : args) arg_pointers.push_back(a.data());
  try {
    app.parse(int(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    // --help/--version exit 0; every usage mistake exits kUsage, as documented.
    if (e.get_exit_code() != 0 && app.get_subcommands().empty()) {
      // No command chosen ("qvl --bogus", "qvl"): say which there are.
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({}))
        if (!sub->get_group().empty()) names.push_back(sub->get_name());
      std::string what = e.what();
      if (args.size() >= 2 && !args[1].empty())
        what = args[1][0] == '-' ? fmt::format("unknown option '{}' (a command comes first)", args[1])
                                 : fmt::format("'{}' is not a qvl command", args[1]);
      fmt::print(stderr, "qvl: {}\nqvl: the commands are {}; `qvl COMMAND --help` describes one, `qvl --help` all\n",
                 what, fmt::join(names, ", "));
      return kUsage;
    }
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  } catch (const qvl::Error& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return kError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return kError;
  }
  // Results go to stdout: losing them (a full disk, a closed pipe) is an error,
  // whatever the command, not a success.
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    const int e = errno;
    fmt::print(stderr, "qvl: error: cannot write the results to stdout{}{}\n", e ? ": " : "", e ? std::strerror(e) : "");
    return kError;
  }
  return exit_code;
}
