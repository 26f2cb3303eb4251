// qvl preprocess / qvl image-info: what the vision encoder would be given for
// an image, with the same defaults as `qvl ask` (image-token budget, page,
// JPEG DCT scaling). `preprocess --out FILE` writes the processor's output
// (pixel_values and grid_thw) as safetensors; without --out, and as
// `image-info`, it prints the sizes, the budget, the patch grid and what the
// image costs in prompt tokens.
#include <fmt/core.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include "common.h"
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/image_budget.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/safetensors_writer.h"
#include "qvl/model/config.h"
#include "qvl/io/paths.h"

namespace qvl::app {
namespace {

struct PreprocessOptions {
  std::string model_dir;
  std::string image;       // a path, or "-" for stdin
  int64_t min_pixels = 0;  // 0: from preprocessor_config.json
  int64_t max_pixels = 0;
  int64_t max_side = 0;
  int64_t max_image_tokens = 0;  // 0: kDefaultImageTokens unless --max-pixels/--max-side is given (as ask)
  int64_t max_image_pixels = ImageLimits{}.max_pixels;
  int page = 1;
  int dpi = 0;
  double page_timeout_s = ImageLimits{}.page_timeout_s;
  std::string out;
  bool force = false;
};

// The bounds as `qvl ask` combines them (image_bounds in apps/qvl/common.cpp).
ImageBounds bounds_of(const PreprocessOptions& o) {
  ModelOptions m;
  m.min_pixels = o.min_pixels;
  m.max_pixels = o.max_pixels;
  m.max_side = o.max_side;
  m.max_image_tokens = o.max_image_tokens;
  return image_bounds(m);
}

// Only preprocessor_config.json is needed, so a missing default model folder is
// not an error: the built-in values are the published Qwen3-VL ones. A folder
// named by --model or $QVL_MODEL must exist, though.
PreprocessorConfig load_config(const PreprocessOptions& o, std::string* source) {
  const char* env = std::getenv("QVL_MODEL");
  PreprocessorConfig cfg;
  *source = "built-in defaults";
  if (!o.model_dir.empty() || (env && *env)) {
    const std::string dir = resolve_model_dir_for_files(o.model_dir);
    cfg = load_preprocessor_config(dir);
    *source = dir + "/preprocessor_config.json";
  } else {
    try {
      const std::string dir = resolve_model_dir_for_files("");
      cfg = load_preprocessor_config(dir);
      *source = dir + "/preprocessor_config.json";
    } catch (const Error&) {
      // no default model folder: keep the built-in values
    }
  }
  return cfg;
}

// The file's bytes, once: they are looked at for the format, the pages and the pixels.
std::vector<uint8_t> read_input(const PreprocessOptions& o, const ImageLimits& limits) {
  return o.image == "-" ? read_stdin_image(limits.max_file_bytes) : read_image_bytes(o.image, limits);
}

struct Prepared {
  std::string name;  // the path, or "stdin"
  std::vector<uint8_t> bytes;
  int pages = 1, page = 1;
  int64_t original_width = 0, original_height = 0;  // before JPEG DCT scaling
  RgbImage image;
  PreprocessorConfig published, cfg;  // preprocessor_config.json alone; with the flags and the budget
  ImageBounds bounds;
  PatchifiedImage patches;
};

void print_info(const Prepared& p, const std::string& config_source) {
  const char* format = image_format_name(detect_image_format(p.bytes.data(), p.bytes.size()));
  fmt::print("image      {} ({}, {} bytes)\n", p.name, format, p.bytes.size());
  if (p.pages > 1) fmt::print("pages      {} (this is page {}; --page N for another)\n", p.pages, p.page);
  fmt::print("original   {}x{}\n", p.original_width, p.original_height);
  // A JPEG far above the budget decodes at 1/2, 1/4 or 1/8 scale: the size qvl works from.
  if (p.original_width != p.image.width)
    fmt::print("decoded    {}x{} (JPEG DCT scaling toward the resized size)\n", p.image.width, p.image.height);
  fmt::print("resized    {}x{} (min_pixels {}, max_pixels {}, from {})\n", p.patches.resized_width,
             p.patches.resized_height, p.cfg.min_pixels, p.cfg.max_pixels, config_source);
  const int64_t tokens = p.patches.grid.tokens(p.cfg.merge_size);
  const int64_t unbounded = image_tokens_for(p.original_height, p.original_width, p.published);
  const char* whose = p.bounds.max_image_tokens == kDefaultImageTokens ? "the default of ask and chat"
                                                                       : "--max-image-tokens";
  const std::string budget = p.bounds.max_image_tokens > 0
                                 ? fmt::format("at most {} image tokens ({}; qvl ocr's default is {})",
                                               p.bounds.max_image_tokens, whose, kDefaultOcrImageTokens)
                                 : std::string("none (--max-pixels or --max-side given)");
  fmt::print("budget     {}: {}\n", budget,
             tokens < unbounded ? fmt::format("applied, preprocessor_config.json alone gives {} tokens", unbounded)
                                : std::string("the image is within it"));
  fmt::print("grid       t={} h={} w={}: {} patches of {} values\n", p.patches.grid.t, p.patches.grid.h,
             p.patches.grid.w, p.patches.grid.patches(), p.patches.patch_dim);
  fmt::print("tokens     {} image tokens ({} with <|vision_start|> and <|vision_end|>)\n", tokens, tokens + 2);
}

void write_output(const PreprocessOptions& o, const PatchifiedImage& p) {
  if (!o.force && path_exists(o.out))
    throw Error(fmt::format("{} already exists; pass --force to overwrite it", o.out));
  const int64_t grid_thw[3] = {p.grid.t, p.grid.h, p.grid.w};
  write_safetensors(o.out,
                    {{"pixel_values", DType::F32, {p.grid.patches(), p.patch_dim}, p.pixel_values.data()},
                     {"grid_thw", DType::I64, {1, 3}, grid_thw}},
                    {{"image", o.image}, {"resized", fmt::format("{}x{}", p.resized_width, p.resized_height)}});
  fmt::print("wrote {}: pixel_values [{}, {}], grid_thw [{}, {}, {}]\n", o.out, p.grid.patches(), p.patch_dim,
             p.grid.t, p.grid.h, p.grid.w);
}

void run(const PreprocessOptions& o) {
  std::string config_source;
  Prepared p;
  p.published = load_config(o, &config_source);
  p.bounds = bounds_of(o);
  try {
    p.cfg = apply_image_bounds(p.published, p.bounds);
  } catch (const Error& e) {
    throw Error(fmt::format("{} (see --min-pixels, --max-pixels, --max-side, --max-image-tokens and {})", e.what(),
                            config_source));
  }
  ImageLimits limits;
  limits.max_pixels = o.max_image_pixels;
  limits.page_timeout_s = o.page_timeout_s;
  DecodeRequest request;
  request.page = o.page;
  request.pdf_dpi = o.dpi;
  request.target_max_pixels = p.cfg.max_pixels;  // as the session decodes: big JPEGs at a reduced DCT scale
  p.name = o.image == "-" ? "stdin" : o.image;
  p.bytes = read_input(o, limits);
  p.page = o.page;
  if (o.out.empty()) {
    try {
      p.pages = image_page_count(p.bytes.data(), p.bytes.size(), p.name, limits);
    } catch (const Error&) {
      // e.g. a TIFF whose directory chain loops after the page asked for: that page still reads
    }
  }
  p.image = decode_image(p.bytes.data(), p.bytes.size(), p.name, limits, request);
  p.patches = preprocess_image(p.image, p.cfg);
  // A JPEG may have been decoded at a reduced scale: its size in the file, for the record.
  p.original_width = p.image.unscaled_width ? p.image.unscaled_width : p.image.width;
  p.original_height = p.image.unscaled_height ? p.image.unscaled_height : p.image.height;
  if (o.out.empty()) print_info(p, config_source);
  else write_output(o, p.patches);
}

const CLI::Range kPositivePixels(int64_t{1}, int64_t{1} << 40);

CLI::App* add_command(CLI::App& app, const char* name, const char* help, PreprocessOptions& o) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("--model", o.model_dir, "Model folder for preprocessor_config.json (default: $QVL_MODEL, "
                                          "models/Qwen3-VL-2B-Instruct, else built-in Qwen3-VL settings)");
  cmd->add_option("--image", o.image, "Image file (PNG, JPEG, WebP, TIFF, BMP, GIF, PDF), or - for stdin")
      ->required();  // a missing file is an error naming it (exit 1), as every bad image is
  cmd->add_option("--min-pixels", o.min_pixels, "Smallest resized area (default: preprocessor_config.json)")
      ->check(kPositivePixels);
  cmd->add_option("--max-pixels", o.max_pixels, "Largest resized area (default: preprocessor_config.json)")
      ->check(kPositivePixels);
  cmd->add_option("--max-side", o.max_side, "Shortcut: largest resized area is max-side squared")
      ->check(integer_in(1, 16384));
  cmd->add_option("--max-image-tokens", o.max_image_tokens,
                  fmt::format("At most N image tokens (default: {}, as qvl ask, unless --max-pixels or --max-side "
                              "is given; the tightest bound wins)",
                              kDefaultImageTokens))
      ->check(integer_in(1, int64_t(1) << 18));
  cmd->add_option("--max-image-pixels", o.max_image_pixels, "Refuse an image that decodes to more pixels than this")
      ->check(integer_in(1, int64_t(1) << 36))
      ->capture_default_str();
  add_page_options(cmd, &o.page, &o.dpi, &o.page_timeout_s);
  return cmd;
}

}  // namespace

void register_preprocess(CLI::App& app, int& exit_code) {
  auto pre = std::make_shared<PreprocessOptions>();
  CLI::App* cmd = add_command(app, "preprocess", "Resize and patchify an image as the model's processor does", *pre);
  cmd->add_option("--out", pre->out, "Write pixel_values (F32) and grid_thw (I64) to this safetensors file");
  cmd->add_flag("--force", pre->force, "Overwrite --out if it exists");
  cmd->callback([pre, &exit_code] {
    run(*pre);
    exit_code = kOk;
  });

  auto info = std::make_shared<PreprocessOptions>();
  CLI::App* info_cmd = add_command(app, "image-info", "Print an image's size, patch grid and prompt-token cost", *info);
  info_cmd->callback([info, &exit_code] {
    run(*info);
    exit_code = kOk;
  });
}

}  // namespace qvl::app
