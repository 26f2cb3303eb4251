#include "qvl/model/model_cost.h"

#include "qvl/error.h"
#include "qvl/model/checkpoint_layout.h"

namespace qvl {
namespace {

// The projections of one text layer, as the checkpoint shapes them ([out, in]).
std::vector<ExpectedTensor> layer_matrices(const TextConfig& t) {
  const TextLayerTensors l = text_layer_tensors(t, 0);
  return {l.q_proj, l.k_proj, l.v_proj, l.o_proj, l.gate_proj, l.up_proj, l.down_proj};
}

int64_t layer_matrix_elements(const TextConfig& t) {
  int64_t n = 0;
  for (const ExpectedTensor& m : layer_matrices(t)) n += element_count(m.shape);
  return n;
}

int64_t output_matrix_elements(const TextConfig& t) { return t.vocab_size * t.hidden_size; }

// The vectors a decode step reads besides the matrices: per layer two RMS
// norms, the q/k norms and any biases; the final norm.
int64_t layer_vector_elements(const TextConfig& t) {
  const TextLayerTensors l = text_layer_tensors(t, 0);
  int64_t n = 0;
  for (const ExpectedTensor* e : {&l.input_norm, &l.post_attention_norm, &l.q_norm, &l.k_norm, &l.q_bias, &l.k_bias,
                                  &l.v_bias, &l.o_bias})
    if (!e->name.empty()) n += element_count(e->shape);
  return n;
}

// Bytes of an int8 matrix [rows, cols]: rows padded to whole groups, one
// float scale per group (kernels/quant.h).
double int8_matrix_bytes(int64_t rows, int64_t cols, int64_t group) {
  const int64_t groups = (cols + group - 1) / group;
  return double(rows) * double(groups) * double(group + int64_t(sizeof(float)));
}

// Bytes of an int4 matrix [rows, cols] (kernels/quant4.h, which model/ may
// not include; tests/unit/test_model_cost.cpp checks these numbers against
// it): rows padded to chunks of 128 columns, two levels per byte, a float16
// scale and offset per 64 columns.
double int4_matrix_bytes(int64_t rows, int64_t cols) {
  constexpr int64_t kChunk = 128, kGroup = 64, kParamBytesPerGroup = 4;
  const int64_t padded = (cols + kChunk - 1) / kChunk * kChunk;
  return double(rows) * double(padded / 2 + padded / kGroup * kParamBytesPerGroup);
}

}  // namespace

int64_t decoder_matrix_elements(const TextConfig& t) {
  return t.num_hidden_layers * layer_matrix_elements(t) + output_matrix_elements(t);
}

double decode_weight_bytes_per_token(const TextConfig& t, ComputeDtype dtype, WeightQuant quant,
                                     int64_t int8_group_size) {
  const double value_bytes = double(bytes_per_value(dtype));
  const double vectors = double(t.num_hidden_layers * layer_vector_elements(t) + t.hidden_size) * value_bytes;
  switch (quant) {
    case WeightQuant::None:
      return double(decoder_matrix_elements(t)) * value_bytes + vectors;
    case WeightQuant::Int8: {
      if (int8_group_size <= 0) throw Error("int8 group size must be positive");
      double matrices = int8_matrix_bytes(t.vocab_size, t.hidden_size, int8_group_size);
      for (const ExpectedTensor& m : layer_matrices(t))
        matrices += double(t.num_hidden_layers) * int8_matrix_bytes(m.shape[0], m.shape[1], int8_group_size);
      return matrices + vectors;
    }
    case WeightQuant::Int4: {
      double matrices = int4_matrix_bytes(t.vocab_size, t.hidden_size);
      for (const ExpectedTensor& m : layer_matrices(t))
        matrices += double(t.num_hidden_layers) * int4_matrix_bytes(m.shape[0], m.shape[1]);
      return matrices + vectors;
    }
  }
  throw Error("decode_weight_bytes_per_token: unknown weight quantization");
}

double prefill_flops(const TextConfig& t, int64_t tokens, int64_t past) {
  const double n = double(tokens), p = double(past);
  const double projections = 2.0 * n * double(t.num_hidden_layers * layer_matrix_elements(t));
  // Query i (0-based among the new ones) sees past + i + 1 keys; QKᵀ and PV
  // each cost 2·head_dim FLOPs per (query head, key) pair.
  const double pairs = n * p + n * (n + 1) / 2;
  const double attention = double(t.num_hidden_layers) * 2.0 * 2.0 * double(t.num_attention_heads * t.head_dim) * pairs;
  const double output = tokens > 0 ? 2.0 * double(output_matrix_elements(t)) : 0.0;
  return projections + attention + output;
}

double vision_flops(const VisionConfig& v, const std::vector<int64_t>& patches_per_image) {
  const double h = double(v.hidden_size);
  const double patch_values = double(v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size);
  // qkv [3h, h], proj [h, h], fc1 [i, h], fc2 [h, i]
  const double block_matrix = 3 * h * h + h * h + 2 * h * double(v.intermediate_size);
  const double merge = double(v.spatial_merge_size * v.spatial_merge_size);
  const double merged_width = h * merge;
  // fc1 [merged, merged], fc2 [out, merged]; the final merger and one per deepstack index
  const double merger_matrix = merged_width * merged_width + double(v.out_hidden_size) * merged_width;
  const double mergers = 1 + double(v.deepstack_visual_indexes.size());
  double flops = 0;
  for (int64_t patches : patches_per_image) {
    const double n = double(patches);
    flops += 2 * n * patch_values * h;
    // QKᵀ and PV: 2·h FLOPs per (query, key) pair each, over all heads.
    flops += double(v.depth) * (2 * n * block_matrix + 2 * 2 * h * n * n);
    flops += mergers * 2 * (n / merge) * merger_matrix;
  }
  return flops;
}

}  // namespace qvl
