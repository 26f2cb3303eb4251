// The vision tower: image patches in, decoder-width features out. It runs the
// TorchScript module qvl makes from the checkpoint (module_builder.h), in
// memory, when the encoder is made: its parameters drive the native blocks
// (vision_blocks.h) and its TorchScript forward is their reference. The
// position data it needs is computed here (positions.h).
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "qvl/model/config.h"
#include "qvl/model/grid.h"
#include "qvl/vision/module_cache.h"  // VisionOptions

namespace qvl {

class Checkpoint;

struct VisionFeatures {
  at::Tensor embeds;                  // [sum of patches / merge², out_hidden], compute dtype
  std::vector<at::Tensor> deepstack;  // one per deepstack layer, same shape
};

class VisionEncoder {
 public:
  // ckpt must outlive the encoder: the module's bf16 parameters view the
  // checkpoint's tensors, and so do int8 vision's other parameters.
  // opts.quant Int8/Int4 with native_blocks: int8 linears (vision_int8.h),
  // the module not made unless block_input or the TorchScript forward runs.
  VisionEncoder(const std::string& model_dir, const ModelConfig& cfg, const Checkpoint& ckpt,
                const VisionOptions& opts);
  ~VisionEncoder();
  VisionEncoder(const VisionEncoder&) = delete;
  VisionEncoder& operator=(const VisionEncoder&) = delete;

  // pixel_values: [N, C*T*P*P] float32, the images' patches one after another
  // in processor order; grids: one per image. Images never attend to each other.
  VisionFeatures encode(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids);

  // What the first block sees: patch embedding plus position embedding [N, hidden] (for tests;
  // runs the module's TorchScript, making the module first with int8 vision).
  at::Tensor block_input(const at::Tensor& pixel_values, const std::vector<ImageGrid>& grids);

  at::ScalarType dtype() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qvl
