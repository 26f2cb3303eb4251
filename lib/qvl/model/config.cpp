#include "qvl/model/config.h"


#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/paths.h"

namespace qvl {
namespace {

using nlohmann::json;

json parse_object(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) throw Error(source + ": not valid JSON");
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  return j;
}

// nlohmann converts between number kinds with a plain cast, which is undefined
// behaviour when the value does not fit (1e300 into an int64_t or a float), so
// numbers are converted here, and only when they fit.
bool convert(const json& v, int64_t* out) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  *out = v.get<int64_t>();
  return true;
}
bool convert(const json& v, double* out) {
  if (!v.is_number()) return false;
  *out = v.get<double>();
  return true;
}
bool convert(const json& v, float* out) {
  double d = 0;
  if (!convert(v, &d) || !(std::fabs(d) <= std::numeric_limits<float>::max())) return false;
  *out = static_cast<float>(d);
  return true;
}
bool convert(const json& v, bool* out) {
  if (!v.is_boolean()) return false;
  *out = v.get<bool>();
  return true;
}
bool convert(const json& v, std::string* out) {
  if (!v.is_string()) return false;
  *out = v.get<std::string>();
  return true;
}
template <class T>
bool convert(const json& v, std::vector<T>* out) {
  if (!v.is_array()) return false;
  std::vector<T> items(v.size());
  for (size_t i = 0; i < items.size(); ++i)
    if (!convert(v[i], &items[i])) return false;
  *out = std::move(items);
  return true;
}

// Reads j[key] into *out when present; a value of the wrong type (or a number
// out of the type's range) is an error.
template <class T>
void read(const json& j, const char* key, T* out, const std::string& source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!convert(*it, out)) throw Error(source + ": field '" + key + "' has the wrong type or is out of range");
}

// Sizes are bounded too, so that arithmetic on them cannot overflow.
constexpr int64_t kMaxSize = int64_t(1) << 31;

void require_positive(int64_t v, const char* key, const std::string& source) {
  if (v <= 0 || v > kMaxSize)
    throw Error(source + ": field '" + std::string(key) + "' must be positive and at most " + std::to_string(kMaxSize));
}

std::string number_text(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%g", v);
  return buffer;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json j = parse_object(json_text, source);
  ModelConfig c;
  read(j, "model_type", &c.model_type, source);
  if (c.model_type != "qwen3_vl")
    throw Error(source + ": model_type '" + c.model_type + "' is not supported (qvl runs qwen3_vl)");
  read(j, "image_token_id", &c.image_token_id, source);
  read(j, "video_token_id", &c.video_token_id, source);
  read(j, "vision_start_token_id", &c.vision_start_token_id, source);
  read(j, "vision_end_token_id", &c.vision_end_token_id, source);
  bool tie_top = c.text.tie_word_embeddings;
  read(j, "tie_word_embeddings", &tie_top, source);
  c.text.tie_word_embeddings = tie_top;

  if (!j.contains("text_config") || !j["text_config"].is_object())
    throw Error(source + ": missing text_config");
  const json& t = j["text_config"];
  TextConfig& tc = c.text;
  read(t, "vocab_size", &tc.vocab_size, source);
  read(t, "hidden_size", &tc.hidden_size, source);
  read(t, "intermediate_size", &tc.intermediate_size, source);
  read(t, "num_hidden_layers", &tc.num_hidden_layers, source);
  read(t, "num_attention_heads", &tc.num_attention_heads, source);
  require_positive(tc.hidden_size, "hidden_size", source);
  require_positive(tc.num_attention_heads, "num_attention_heads", source);  // before dividing by it
  tc.num_key_value_heads = tc.num_attention_heads;
  read(t, "num_key_value_heads", &tc.num_key_value_heads, source);
  tc.head_dim = tc.hidden_size / tc.num_attention_heads;
  read(t, "head_dim", &tc.head_dim, source);
  read(t, "rms_norm_eps", &tc.rms_norm_eps, source);
  read(t, "attention_bias", &tc.attention_bias, source);
  read(t, "max_position_embeddings", &tc.max_position_embeddings, source);
  read(t, "hidden_act", &tc.hidden_act, source);
  read(t, "tie_word_embeddings", &tc.tie_word_embeddings, source);
  read(t, "rope_theta", &tc.rope_theta, source);
  // Published checkpoints put rope settings in rope_scaling (+ rope_theta beside
  // it); newer transformers write rope_parameters holding rope_theta as well.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = t.find(key);
    if (it == t.end() || !it->is_object()) continue;
    read(*it, "rope_theta", &tc.rope_theta, source);
    read(*it, "mrope_interleaved", &tc.mrope_interleaved, source);
    if (it->contains("mrope_section")) {
      std::vector<int64_t> s;
      read(*it, "mrope_section", &s, source);
      if (s.size() != 3) throw Error(source + ": mrope_section must have 3 entries");
      tc.mrope_section = {s[0], s[1], s[2]};
    }
    std::string type = "default";
    read(*it, "rope_type", &type, source);
    if (type != "default") throw Error(source + ": rope_type '" + type + "' is not supported");
  }
  // Values that cannot give an answer: a zero or negative epsilon divides by
  // zero in every norm, a zero theta makes every rotation NaN.
  if (!(tc.rms_norm_eps > 0 && tc.rms_norm_eps < 1))
    throw Error(source + ": rms_norm_eps " + number_text(tc.rms_norm_eps) + " is out of range (0, 1)");
  if (!(tc.rope_theta > 0 && std::isfinite(tc.rope_theta)))
    throw Error(source + ": rope_theta " + number_text(tc.rope_theta) + " must be positive");
  for (const json* scope : {static_cast<const json*>(&j), &t})
    for (const char* key : {"torch_dtype", "dtype"})
      if (c.weights_dtype.empty()) read(*scope, key, &c.weights_dtype, source);
  if (!c.weights_dtype.empty() && c.weights_dtype != "bfloat16" && c.weights_dtype != "float16" &&
      c.weights_dtype != "float32")
    throw Error(source + ": dtype '" + c.weights_dtype + "' is not supported (bfloat16, float16 or float32)");
  require_positive(tc.vocab_size, "vocab_size", source);
  require_positive(tc.intermediate_size, "intermediate_size", source);
  require_positive(tc.num_hidden_layers, "num_hidden_layers", source);
  require_positive(tc.num_key_value_heads, "num_key_value_heads", source);
  require_positive(tc.head_dim, "head_dim", source);
  if (tc.num_attention_heads % tc.num_key_value_heads != 0)
    throw Error(source + ": num_attention_heads must be a multiple of num_key_value_heads");
  for (int64_t section : tc.mrope_section)
    if (section < 0 || section > tc.head_dim) throw Error(source + ": mrope_section entries must be in [0, head_dim]");
  if (2 * (tc.mrope_section[0] + tc.mrope_section[1] + tc.mrope_section[2]) != tc.head_dim)
    throw Error(source + ": mrope_section must sum to head_dim/2");
  if (tc.hidden_act != "silu") throw Error(source + ": text hidden_act '" + tc.hidden_act + "' is not supported");

  if (!j.contains("vision_config") || !j["vision_config"].is_object())
    throw Error(source + ": missing vision_config");
  const json& v = j["vision_config"];
  VisionConfig& vc = c.vision;
  read(v, "depth", &vc.depth, source);
  read(v, "hidden_size", &vc.hidden_size, source);
  read(v, "intermediate_size", &vc.intermediate_size, source);
  read(v, "num_heads", &vc.num_heads, source);
  read(v, "in_channels", &vc.in_channels, source);
  read(v, "patch_size", &vc.patch_size, source);
  read(v, "temporal_patch_size", &vc.temporal_patch_size, source);
  read(v, "spatial_merge_size", &vc.spatial_merge_size, source);
  read(v, "out_hidden_size", &vc.out_hidden_size, source);
  read(v, "num_position_embeddings", &vc.num_position_embeddings, source);
  read(v, "deepstack_visual_indexes", &vc.deepstack_visual_indexes, source);
  read(v, "hidden_act", &vc.hidden_act, source);
  require_positive(vc.depth, "vision depth", source);
  require_positive(vc.hidden_size, "vision hidden_size", source);
  require_positive(vc.num_heads, "vision num_heads", source);
  require_positive(vc.patch_size, "vision patch_size", source);
  require_positive(vc.spatial_merge_size, "vision spatial_merge_size", source);
  require_positive(vc.num_position_embeddings, "vision num_position_embeddings", source);
  if (vc.hidden_size % vc.num_heads != 0) throw Error(source + ": vision hidden_size must divide by num_heads");
  for (int64_t idx : vc.deepstack_visual_indexes)
    if (idx < 0 || idx >= vc.depth) throw Error(source + ": deepstack_visual_indexes entry out of range");
  if (vc.out_hidden_size != tc.hidden_size)
    throw Error(source + ": vision out_hidden_size must equal the text hidden_size");
  return c;
}

PreprocessorConfig parse_preprocessor_config(const std::string& json_text, const std::string& source) {
  json j = parse_object(json_text, source);
  PreprocessorConfig p;
  if (j.contains("size") && j["size"].is_object()) {
    read(j["size"], "shortest_edge", &p.min_pixels, source);
    read(j["size"], "longest_edge", &p.max_pixels, source);
  }
  read(j, "min_pixels", &p.min_pixels, source);
  read(j, "max_pixels", &p.max_pixels, source);
  read(j, "patch_size", &p.patch_size, source);
  read(j, "temporal_patch_size", &p.temporal_patch_size, source);
  read(j, "merge_size", &p.merge_size, source);
  std::vector<float> mean, std;
  read(j, "image_mean", &mean, source);
  read(j, "image_std", &std, source);
  if (!mean.empty()) {
    if (mean.size() != 3) throw Error(source + ": image_mean must have 3 entries");
    p.image_mean = {mean[0], mean[1], mean[2]};
  }
  if (!std.empty()) {
    if (std.size() != 3) throw Error(source + ": image_std must have 3 entries");
    p.image_std = {std[0], std[1], std[2]};
  }
  // Every image is resized to within [min_pixels, max_pixels] and cut into
  // patches, so a downloaded file with huge values would make every image an
  // allocation bomb. 2^28 pixels (16384 x 16384) is already more tokens than
  // the model's context; real patch settings are 14 or 16, 2 and 2.
  constexpr int64_t kMaxImagePixels = int64_t(1) << 28;
  constexpr int64_t kMaxPatchSetting = 64;
  for (auto [value, key] : {std::pair{p.patch_size, "patch_size"}, std::pair{p.merge_size, "merge_size"},
                            std::pair{p.temporal_patch_size, "temporal_patch_size"}})
    if (value <= 0 || value > kMaxPatchSetting)
      throw Error(source + ": " + key + " " + std::to_string(value) + " is out of range [1, " +
                  std::to_string(kMaxPatchSetting) + "]");
  if (p.min_pixels <= 0 || p.max_pixels < p.min_pixels || p.max_pixels > kMaxImagePixels)
    throw Error(source + ": need 0 < min_pixels <= max_pixels <= " + std::to_string(kMaxImagePixels) + " (got " +
                std::to_string(p.min_pixels) + ", " + std::to_string(p.max_pixels) + ")");
  return p;
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& source) {
  json j = parse_object(json_text, source);
  GenerationConfig g;
  read(j, "do_sample", &g.do_sample, source);
  read(j, "temperature", &g.temperature, source);
  read(j, "top_k", &g.top_k, source);
  read(j, "top_p", &g.top_p, source);
  read(j, "repetition_penalty", &g.repetition_penalty, source);
  read(j, "presence_penalty", &g.presence_penalty, source);
  read(j, "pad_token_id", &g.pad_token_id, source);
  auto it = j.find("eos_token_id");
  if (it != j.end()) {
    if (it->is_number_integer()) g.eos_token_ids = {it->get<int64_t>()};
    else read(j, "eos_token_id", &g.eos_token_ids, source);
  }
  return g;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  return parse_model_config(read_text_file(path), path);
}

PreprocessorConfig load_preprocessor_config(const std::string& model_dir) {
  const std::string path = model_dir + "/preprocessor_config.json";
  if (!path_exists(path)) return {};
  return parse_preprocessor_config(read_text_file(path), path);
}

GenerationConfig load_generation_config(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  if (!path_exists(path)) return {};
  return parse_generation_config(read_text_file(path), path);
}

}  // namespace qvl
