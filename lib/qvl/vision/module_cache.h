// The vision encoder's options, and where `qvl export` writes the TorchScript
// vision module of a checkpoint as a file (module_builder.h makes it from the
// checkpoint, with libtorch alone). qvl itself makes the module in memory
// and never reads the file back (vision_encoder.cpp says why).
#pragma once
#include <c10/core/ScalarType.h>

#include <string>

#include "qvl/decoder/options.h"  // NoteCallback
#include "qvl/model/precision.h"  // WeightQuant

namespace qvl {

class Checkpoint;

struct VisionOptions {
  at::ScalarType dtype = at::kBFloat16;  // kBFloat16 or kFloat
  std::string cache_dir;  // "": the model's cache folder (io/cache_dir.h)
  // Run the transformer blocks natively (vision_blocks.h); false runs the
  // module's own TorchScript forward, several times slower, kept as the reference.
  bool native_blocks = true;
  // Int8 or Int4 (the session's --quant): the native tower's linears run the
  // int8 GEMM with int8 weights cached in cache_dir (vision_int8.h), and the
  // module is not made (block_input and the TorchScript forward make it
  // when asked). There is no int4 vision: its GEMMs would be no faster.
  WeightQuant quant = WeightQuant::None;
  NoteCallback on_note;  // hears about building the int8 cache (seconds, once)
};

const char* vision_dtype_tag(at::ScalarType dtype);  // "bf16" or "f32"; throws for others

// What a module is made from: the checkpoint's fingerprint and a hash of
// config.json's bytes.
std::string vision_module_key(const std::string& model_dir, const Checkpoint& ckpt);

// <cache_dir>/vision-<key>-<module version>-<dtype>.pt: a module made from
// other weights or another config.json, or by another version of the builder,
// has another name.
std::string vision_module_path(const std::string& cache_dir, const std::string& key, at::ScalarType dtype);

struct VisionModuleFile {
  std::string path;
  bool built = false;  // made just now (missing, damaged or forced), not found in the cache
};

// The module's file, built and saved first if it is missing or damaged (or
// always, with force): `qvl export`. Modules of the same weights and dtype
// made from another config.json or by other builder versions are removed.
VisionModuleFile ensure_vision_module(const std::string& model_dir, const Checkpoint& ckpt, const VisionOptions& opts,
                                      bool force = false);

}  // namespace qvl
