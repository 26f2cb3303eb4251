// Model, processor and generation settings as plain data, read from the
// Hugging Face folder. Missing optional fields take the reference defaults.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace qvl {

struct TextConfig {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 2048;
  int64_t intermediate_size = 6144;
  int64_t num_hidden_layers = 28;
  int64_t num_attention_heads = 16;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 128;
  double rms_norm_eps = 1e-6;
  double rope_theta = 5000000.0;
  std::array<int64_t, 3> mrope_section = {24, 20, 20};  // temporal, height, width
  bool mrope_interleaved = true;
  bool attention_bias = false;
  bool tie_word_embeddings = true;
  int64_t max_position_embeddings = 262144;
  std::string hidden_act = "silu";
};

struct VisionConfig {
  int64_t depth = 24;
  int64_t hidden_size = 1024;
  int64_t intermediate_size = 4096;
  int64_t num_heads = 16;
  int64_t in_channels = 3;
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t spatial_merge_size = 2;
  int64_t out_hidden_size = 2048;
  int64_t num_position_embeddings = 2304;
  std::vector<int64_t> deepstack_visual_indexes = {5, 11, 17};
  std::string hidden_act = "gelu_pytorch_tanh";
};

struct ModelConfig {
  std::string model_type = "qwen3_vl";
  TextConfig text;
  VisionConfig vision;
  int64_t image_token_id = 151655;
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;
  int64_t vision_end_token_id = 151653;
  // The dtype config.json says the weights were saved in ("bfloat16",
  // "float16", "float32"; "" when it does not say): torch_dtype or dtype, at
  // the top level or in text_config.
  std::string weights_dtype;
};

struct PreprocessorConfig {
  int64_t min_pixels = 65536;     // size.shortest_edge (as the reference names it)
  int64_t max_pixels = 16777216;  // size.longest_edge
  int64_t patch_size = 16;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};
};

struct GenerationConfig {
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;
  double top_p = 1.0;
  double repetition_penalty = 1.0;
  double presence_penalty = 0.0;
  std::vector<int64_t> eos_token_ids = {151645, 151643};
  int64_t pad_token_id = 151643;
};

// Each parser takes the JSON text; the load_* helpers read from a model folder.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source = "config.json");
PreprocessorConfig parse_preprocessor_config(const std::string& json_text,
                                             const std::string& source = "preprocessor_config.json");
GenerationConfig parse_generation_config(const std::string& json_text,
                                         const std::string& source = "generation_config.json");

ModelConfig load_model_config(const std::string& model_dir);
PreprocessorConfig load_preprocessor_config(const std::string& model_dir);  // defaults if absent
GenerationConfig load_generation_config(const std::string& model_dir);      // defaults if absent

}  // namespace qvl
