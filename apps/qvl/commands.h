// Each subcommand lives in its own file and registers itself on the CLI11 app.
// A command's callback stores its exit status in `exit_code`; errors are thrown
// as qvl::Error and printed by main() as one line.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "qvl/image/decode.h"
#include "qvl/image/image_budget.h"

namespace qvl::app {

// Exit statuses, documented in the README.
enum ExitCode : int {
  kOk = 0,
  kError = 1,        // bad input, missing model, I/O failure
  kUsage = 2,        // wrong flags (CLI11)
  kSomeFailed = 3,   // ocr: at least one file got an error record
  kBusy = 75,        // ocr: another run holds the lock on --output (EX_TEMPFAIL: try again later)
  kInterrupted = 130,
};

// Options shared by every command that loads the model.
struct ModelOptions {
  std::string model_dir;   // --model, else $QVL_MODEL, else models/Qwen3-VL-2B-Instruct
  int threads = 0;         // 0: all cores
  std::string dtype = "bf16";
  std::string load = "lazy";
  std::string quant = "none";  // none | int8 | int4
  int64_t max_context = 4096;
  int64_t max_memory_mb = 0;  // 0: what /proc/meminfo says is available
  int64_t min_pixels = 0;  // 0: from preprocessor_config.json
  int64_t max_pixels = 0;
  int64_t max_side = 0;
  // Image-token budget: the given one, else default_image_tokens unless
  // --max-pixels or --max-side bounds the size (image/image_budget.h).
  int64_t max_image_tokens = 0;
  int64_t default_image_tokens = kDefaultImageTokens;  // a command sets its own before add_model_options
  int64_t max_image_pixels = ImageLimits{}.max_pixels;  // decoded pixels (after JPEG DCT scaling)
  int page = 1;  // --page (ask, chat): the page of a PDF or multi-page TIFF
  int dpi = 0;   // --dpi: PDF rendering resolution; 0: kDefaultPdfDpi
  double page_timeout_s = ImageLimits{}.page_timeout_s;  // --page-timeout: seconds a PDF page may render
  bool quiet = false;
  bool verbose = false;
};
void add_model_options(CLI::App* cmd, ModelOptions& opts);
// --dpi and --page-timeout, and with `page` also --page (commands that read one
// page of a document).
void add_page_options(CLI::App* cmd, int* page, int* dpi, double* page_timeout_s);
// The size bounds the flags give: --max-side folded into max_pixels (the
// tightest wins), and the image-token budget (see ModelOptions::max_image_tokens).
ImageBounds image_bounds(const ModelOptions& opts);
// --image's check: an existing file, or "-" for stdin.
CLI::Validator existing_file_or_stdin();

// Flag checks that run while the command line is parsed (usage errors, exit 2,
// before anything loads), with messages in words ("must be ≥ 1") rather than
// CLI11's ranges of 309-digit numbers.
CLI::Validator integer_in(int64_t lo, int64_t hi);   // a whole number in [lo, hi]
CLI::Validator unsigned_integer();                   // digits only: 0 .. 2^64-1 (no "-1" wrapping round)
// A finite number; lo/hi bound it, open or closed.
CLI::Validator number_in(double lo, bool lo_open, double hi, bool hi_open);
CLI::Validator thread_count();                       // 0 (every core) .. 4 x the usable cores
// Resolves --model/$QVL_MODEL and checks the folder looks like a model; throws
// qvl::Error with download instructions when it does not.
std::string resolve_model_dir(const ModelOptions& opts);
// Just the folder for commands that need only tokenizer/config files.
std::string resolve_model_dir_for_files(const std::string& flag_value);

void register_tokenize(CLI::App& app, int& exit_code);
void register_preprocess(CLI::App& app, int& exit_code);
void register_ask(CLI::App& app, int& exit_code);
void register_synth(CLI::App& app, int& exit_code);
void register_export(CLI::App& app, int& exit_code);
void register_ocr(CLI::App& app, int& exit_code);
void register_chat(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);  // also the hidden bench-run
void register_serve(CLI::App& app, int& exit_code);

}  // namespace qvl::app
