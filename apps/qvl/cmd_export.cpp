// qvl export: writes the TorchScript vision module of a model folder, made from
// its checkpoint, as a file (for Python's torch.jit.load and cross-checks; qvl
// itself makes the module in memory at every run) and prints where it is.
#include <fmt/core.h>

#include <chrono>
#include <memory>
#include <string>
#include <sys/stat.h>

#include "commands.h"
#include "qvl/io/safetensors.h"
#include "qvl/vision/module_cache.h"

namespace qvl::app {
namespace {

struct ExportFlags {
  std::string model_dir;
  std::string dtype = "bf16";
  std::string cache_dir;
  bool force = false;
};

int run_export(const ExportFlags& f) {
  const std::string model_dir = resolve_model_dir_for_files(f.model_dir);
  const Checkpoint ckpt(model_dir);
  VisionOptions opts;
  opts.dtype = f.dtype == "f32" ? at::kFloat : at::kBFloat16;
  opts.cache_dir = f.cache_dir;
  const auto start = std::chrono::steady_clock::now();
  const VisionModuleFile file = ensure_vision_module(model_dir, ckpt, opts, f.force);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  struct stat st {};
  ::stat(file.path.c_str(), &st);
  fmt::print(stderr, "vision module ({}, {:.1f} MB): {}\n", f.dtype, st.st_size / 1e6,
             file.built ? fmt::format("built in {:.1f} s", seconds) : std::string("already up to date"));
  fmt::print("{}\n", file.path);
  return kOk;
}

}  // namespace

void register_export(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ExportFlags>();
  CLI::App* cmd = app.add_subcommand("export", "Write the model's TorchScript vision module as a file (for Python's torch.jit.load; qvl makes it in memory) and print its path");
  cmd->add_option("--model", flags->model_dir, "Model folder (default: $QVL_MODEL or models/Qwen3-VL-2B-Instruct)");
  cmd->add_option("--dtype", flags->dtype, "Compute dtype of the module")->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--cache-dir", flags->cache_dir,
                  "Where to put it (default: <model>/.qvl-cache if writable, else ~/.cache/qvl/<fingerprint>)");
  cmd->add_flag("--force", flags->force, "Rebuild even when an up-to-date module exists");
  cmd->callback([flags, &exit_code] { exit_code = run_export(*flags); });
}

}  // namespace qvl::app
