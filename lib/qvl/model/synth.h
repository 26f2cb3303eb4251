// A Hugging Face style checkpoint folder with random weights of the shapes a
// config implies: every command can then run on the real model size without
// the real weights (speed and memory work). Values are deterministic from the
// seed and scaled so that a forward pass stays numerically sane.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qvl/io/safetensors.h"

namespace qvl {

struct SynthOptions {
  std::string config_path;       // config.json of the model to imitate
  std::string out_dir;           // created if absent; must be empty unless force
  uint64_t seed = 0;
  DType dtype = DType::BF16;     // BF16 or F32 (F32 holds the same bf16-exact values)
  std::string tokenizer_from;    // supplies the tokenizer/processor files the config's folder lacks
  uint64_t shard_size = 2000000000;  // data bytes per shard; a larger tensor gets a shard alone
  bool force = false;            // write into a non-empty folder, replacing its checkpoint
};

struct SynthResult {
  int64_t tensors = 0;
  int64_t parameters = 0;
  uint64_t bytes = 0;                      // size of all shard files
  std::vector<std::string> shards;         // file names, in order
  std::vector<std::string> copied_files;   // "name <- source folder"
  std::vector<std::string> missing_files;  // files a model folder needs that no source had
};

// Called after each shard is in place, with its file name and size.
using ShardWritten = std::function<void(const std::string& file, uint64_t bytes)>;

// Throws qvl::Error (bad config, non-empty or unwritable folder, disk full).
SynthResult synthesize_checkpoint(const SynthOptions& opts, const ShardWritten& on_shard = nullptr);

}  // namespace qvl
