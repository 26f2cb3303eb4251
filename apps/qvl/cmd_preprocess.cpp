// qvl preprocess / qvl image-info: what the vision encoder would be given for
// an image. `preprocess --out FILE` writes the processor's output (pixel_values
// and grid_thw) as safetensors; without --out, and as `image-info`, it prints
// the sizes, the patch grid and what the image costs in prompt tokens.
#include <fmt/core.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "commands.h"
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"
#include "qvl/io/paths.h"

namespace qvl::app {
namespace {

struct PreprocessOptions {
  std::string model_dir;
  std::string image;
  int64_t min_pixels = 0;  // 0: from preprocessor_config.json
  int64_t max_pixels = 0;
  std::string out;
  bool force = false;
};

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
  if (o.min_pixels > 0) cfg.min_pixels = o.min_pixels;
  if (o.max_pixels > 0) cfg.max_pixels = o.max_pixels;
  if (cfg.min_pixels > cfg.max_pixels)
    throw Error(fmt::format("min_pixels {} is larger than max_pixels {} (see --min-pixels, --max-pixels and {})",
                            cfg.min_pixels, cfg.max_pixels, *source));
  return cfg;
}

void print_info(const PreprocessOptions& o, const RgbImage& img, const PatchifiedImage& p,
                const PreprocessorConfig& cfg, const std::string& config_source) {
  const MappedFile file(o.image);
  const char* format = image_format_name(detect_image_format(file.data(), file.size()));
  fmt::print("image      {} ({}, {} bytes)\n", o.image, format, file.size());
  fmt::print("original   {}x{}\n", img.width, img.height);
  fmt::print("resized    {}x{} (min_pixels {}, max_pixels {}, from {})\n", p.resized_width, p.resized_height,
             cfg.min_pixels, cfg.max_pixels, config_source);
  fmt::print("grid       t={} h={} w={}: {} patches of {} values\n", p.grid.t, p.grid.h, p.grid.w, p.grid.patches(),
             p.patch_dim);
  const int64_t tokens = p.grid.tokens(cfg.merge_size);
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
  const PreprocessorConfig cfg = load_config(o, &config_source);
  const RgbImage img = decode_image_file(o.image);
  const PatchifiedImage p = preprocess_image(img, cfg);
  if (o.out.empty()) print_info(o, img, p, cfg, config_source);
  else write_output(o, p);
}

const CLI::Range kPositivePixels(int64_t{1}, int64_t{1} << 40);

CLI::App* add_command(CLI::App& app, const char* name, const char* help, PreprocessOptions& o) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("--model", o.model_dir, "Model folder for preprocessor_config.json (default: $QVL_MODEL, "
                                          "models/Qwen3-VL-2B-Instruct, else built-in Qwen3-VL settings)");
  cmd->add_option("--image", o.image, "PNG or JPEG file")->required();
  cmd->add_option("--min-pixels", o.min_pixels, "Smallest resized area (default: preprocessor_config.json)")
      ->check(kPositivePixels);
  cmd->add_option("--max-pixels", o.max_pixels, "Largest resized area (default: preprocessor_config.json)")
      ->check(kPositivePixels);
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
