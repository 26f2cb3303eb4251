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
  std::string cache_dir;  // "": <model_dir>/.qvl-cache if writable, else ~/.cache/qvl/<fingerprint>
  bool build_if_missing = true;
};

const char* vision_dtype_tag(at::ScalarType dtype);  // "bf16" or "f32"; throws for others

// The folder opts.cache_dir names, else the default above; created if missing.
std::string vision_cache_dir(const std::string& model_dir, const std::string& fingerprint,
                             const VisionOptions& opts);

// <cache_dir>/vision-<fingerprint>-<script version>-<dtype>.pt: a module made
// from other weights, or by another version of the script, is never picked up.
std::string vision_module_path(const std::string& cache_dir, const std::string& fingerprint,
                               at::ScalarType dtype);

// Runs the export script ($QVL_PYTHON, else /usr/bin/python3); the script
// writes out_path atomically. Throws qvl::Error saying what to install when
// Python or its torch is missing.
void build_vision_module(const std::string& model_dir, at::ScalarType dtype, const std::string& out_path);

// The module's path, built first if it is missing (or always, with force).
// Modules of the same weights and dtype made by other script versions are removed.
std::string ensure_vision_module(const std::string& model_dir, const Checkpoint& ckpt,
                                 const VisionOptions& opts, bool force = false);

}  // namespace qvl
