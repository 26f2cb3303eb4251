// qvl synth: a model folder with random weights of a config's shapes, for
// speed and memory work without downloading the real weights.
#include <fmt/core.h>

#include <chrono>
#include <memory>

#include "commands.h"
#include "qvl/model/synth.h"

namespace qvl::app {
namespace {

struct SynthFlags {
  std::string config;
  std::string out;
  uint64_t seed = 0;
  std::string dtype = "bf16";
  std::string tokenizer_from;
  uint64_t shard_size = 2000000000;
  bool force = false;
  bool quiet = false;
};

int run_synth(const SynthFlags& f) {
  SynthOptions opts;
  opts.config_path = f.config;
  opts.out_dir = f.out;
  opts.seed = f.seed;
  opts.dtype = f.dtype == "f32" ? DType::F32 : DType::BF16;
  opts.tokenizer_from = f.tokenizer_from;
  opts.shard_size = f.shard_size;
  opts.force = f.force;

  const auto start = std::chrono::steady_clock::now();
  auto on_shard = [&](const std::string& file, uint64_t bytes) {
    if (!f.quiet) fmt::print(stderr, "wrote {}/{} ({:.2f} GB)\n", f.out, file, bytes / 1e9);
  };
  const SynthResult r = synthesize_checkpoint(opts, on_shard);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (const std::string& name : r.missing_files)
    fmt::print(stderr, "qvl: warning: no {} next to the config or in --tokenizer-from; commands that need it will fail\n",
               name);
  fmt::print("{}: {} tensors, {} parameters ({:.3f} B), {} bytes in {} shard{}, {:.1f} s\n", f.out, r.tensors,
             r.parameters, r.parameters / 1e9, r.bytes, r.shards.size(), r.shards.size() == 1 ? "" : "s", seconds);
  return kOk;
}

}  // namespace

void register_synth(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<SynthFlags>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a model folder with random weights of the shapes a config.json implies (for speed work)");
  cmd->add_option("--config", flags->config, "config.json of the model to imitate")->required();
  cmd->add_option("--out", flags->out, "Output folder (created; must be empty unless --force)")->required();
  cmd->add_option("--seed", flags->seed, "Random seed: the same seed gives the same weights");
  cmd->add_option("--dtype", flags->dtype, "Weight dtype on disk")->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--tokenizer-from", flags->tokenizer_from,
                  "Folder supplying tokenizer/processor/generation/chat-template files the config's folder lacks");
  cmd->add_option("--shard-size", flags->shard_size, "Largest shard in bytes (suffixes kB, MB, GB allowed)")
      ->transform(CLI::AsSizeValue(true));
  cmd->add_flag("--force", flags->force, "Write into a non-empty folder, replacing its checkpoint");
  cmd->add_flag("-q,--quiet", flags->quiet, "Print only the summary");
  cmd->callback([flags, &exit_code] { exit_code = run_synth(*flags); });
}

}  // namespace qvl::app
