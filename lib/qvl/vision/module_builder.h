// Makes qvl's TorchScript vision module (the vision tower, its patch merger
// and the deepstack mergers) with libtorch alone: the checkpoint's tensors
// become the module's parameters and its methods are TorchScript source
// compiled here. No Python is involved; a Python user can still
// torch.jit.load the saved file and run it.
//
// The module, as qvl loads it (vision_encoder.cpp):
//   parameters  named as the checkpoint's model.visual.* tensors without that
//               prefix ("blocks.3.attn.qkv.weight", ...), in the compute dtype;
//               patch_embed.proj.weight is flattened to [hidden, C*T*P*P]
//               (the Conv3d's kernel equals its stride: a linear map per patch)
//   forward     (pixel_values [N, C*T*P*P] float32, pos_index [4, N] int64,
//                pos_weight [4, N] float32, rope_cos, rope_sin [N, head_dim]
//                float32, seq_lens List[int])
//               -> (merged [N/merge², out_hidden], [deepstack features])
//   block_input (pixel_values, pos_index, pos_weight) -> the first block's input
// The inputs are what positions.h computes. scripts/export_torchscript.py
// writes the same module from Python (an optional cross-check:
// scripts/check_vision_module.py).
#pragma once
#include <c10/core/ScalarType.h>

#include <map>
#include <set>
#include <string>

namespace at {
class Tensor;
}
namespace torch::jit {
struct Module;
}

namespace qvl {

class Checkpoint;
struct ModelConfig;

// dtype: kBFloat16 or kFloat. Parameters whose checkpoint dtype already is
// `dtype` are views of the mapped checkpoint (no copy, read-only): the
// Checkpoint must outlive the module. Throws qvl::Error naming a vision tensor
// that is missing or misshapen for cfg.
torch::jit::Module build_vision_module(const ModelConfig& cfg, const Checkpoint& ckpt, at::ScalarType dtype);

// The parameters build_vision_module gives the module, by the same names and
// in the same dtype and shape, without making a module: for the native tower
// when no module need be loaded (int8 vision, vision_encoder.cpp). Names in
// `leave_out` are skipped (never converted, so never copied). Same views and
// lifetime rule as build_vision_module; throws qvl::Error as it does.
std::map<std::string, at::Tensor> vision_parameters(const ModelConfig& cfg, const Checkpoint& ckpt,
                                                    at::ScalarType dtype, const std::set<std::string>& leave_out = {});

// Writes the module to `path` atomically (a temporary file renamed into place);
// throws qvl::Error when it cannot, leaving nothing behind.
void save_vision_module(torch::jit::Module& module, const std::string& path);

// A short hash of the module's TorchScript source and layout. It is part of
// every cached module's name, so a change to either makes old modules stale.
std::string vision_module_version();

}  // namespace qvl
