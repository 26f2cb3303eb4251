// Where the TorchScript vision module of a checkpoint lives, and how qvl builds
// it: by running the embedded export script with Debian's Python, whose torch
// is the libtorch qvl links.
#pragma once
#include <c10/core/ScalarType.h>

#include <string>

namespace qvl {

class Checkpoint;

struct VisionOptions {
  at::ScalarType dtype = at::kBFloat16;  // kBFloat16 or kFloat
  std::string cache_dir;  // "": $QVL_CACHE_DIR, else <model_dir>/.qvl-cache if writable, else ~/.cache/qvl/<fingerprint>
  bool build_if_missing = true;
  // Run the transformer blocks natively (vision_blocks.h); false runs the
  // module's own TorchScript forward, several times slower, kept as the reference.
  bool native_blocks = true;
};

const char* vision_dtype_tag(at::ScalarType dtype);  // "bf16" or "f32"; throws for others

// The folder opts.cache_dir names, else the default above; created if missing.
std::string vision_cache_dir(const std::string& model_dir, const std::string& fingerprint,
                             const VisionOptions& opts);

// What a module is made from: the checkpoint's fingerprint and a hash of
// config.json's bytes.
std::string vision_module_key(const std::string& model_dir, const Checkpoint& ckpt);

// <cache_dir>/vision-<key>-<script version>-<dtype>.pt: a module made from
// other weights or another config.json, or by another version of the script,
// is never picked up.
std::string vision_module_path(const std::string& cache_dir, const std::string& key, at::ScalarType dtype);

// Runs the export script ($QVL_PYTHON, else /usr/bin/python3); the script
// writes out_path atomically. Throws qvl::Error saying what to install when
// Python or its torch is missing.
void build_vision_module(const std::string& model_dir, at::ScalarType dtype, const std::string& out_path);

// The module's path, built first if it is missing or damaged (or always, with
// force). Modules of the same weights and dtype made from another config.json
// or by other script versions are removed.
std::string ensure_vision_module(const std::string& model_dir, const Checkpoint& ckpt,
                                 const VisionOptions& opts, bool force = false);

}  // namespace qvl
