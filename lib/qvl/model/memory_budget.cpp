#include "qvl/model/memory_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "qvl/error.h"
#include "qvl/model/checkpoint_layout.h"

namespace qvl {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;
constexpr int64_t kFloatBytes = 4;

// Measured: `qvl ask` on the tiny model (whose weights are 12 MB) peaks at
// 225-300 MB resident: libtorch's code, oneDNN's and the allocator's pools,
// and the 150k-entry tokenizer.
constexpr int64_t kRuntimeBytes = 350 * kMiB;

// The int8 cache's layout (kernels/quant.h): rows padded to whole groups of
// kDefaultInt8GroupSize columns, one float scale per group.
constexpr int64_t kInt8GroupSize = kDefaultInt8GroupSize;
// Queries per attention block, in the vision tower and in a long prefill.
constexpr int64_t kQueryBlock = 256;

int64_t dtype_bytes(const MemoryOptions& o) { return bytes_per_value(o.dtype); }

bool is_quantized(const MemoryOptions& o) { return o.quant != WeightQuant::None; }

int threads_of(const MemoryOptions& o) {
  if (o.threads > 0) return o.threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t int8_matrix_bytes(int64_t rows, int64_t cols) {
  const int64_t padded = (cols + kInt8GroupSize - 1) / kInt8GroupSize * kInt8GroupSize;
  return rows * padded + rows * (padded / kInt8GroupSize) * kFloatBytes;
}

// The int4 cache's layout (kernels/quant4.h): rows padded to 128 columns, half
// a byte per weight, two float16 per group of 64.
int64_t int4_matrix_bytes(int64_t rows, int64_t cols) {
  const int64_t padded = std::max<int64_t>(128, (cols + 127) / 128 * 128);
  return rows * padded / 2 + rows * (padded / 64) * 4;
}

int64_t quantized_matrix_bytes(WeightQuant quant, int64_t rows, int64_t cols) {
  return quant == WeightQuant::Int4 ? int4_matrix_bytes(rows, cols) : int8_matrix_bytes(rows, cols);
}

int64_t text_weight_bytes(const ModelConfig& cfg, int64_t dtype_size, WeightQuant quant) {
  const bool int8 = quant != WeightQuant::None;  // (either kind)
  const TextConfig& t = cfg.text;
  int64_t bytes = 0;
  for (const ExpectedTensor& e : expected_tensors(cfg)) {
    if (!starts_with(e.name, "model.language_model.") && e.name != "lm_head.weight") continue;
    const int64_t n = element_count(e.shape);
    if (!int8) {
      bytes += n * dtype_size;  // bf16: the mapped checkpoint itself; f32: converted copies
    } else if (ends_with(e.name, "_proj.weight") || e.name == "lm_head.weight") {
      bytes += quantized_matrix_bytes(quant, e.shape[0], e.shape[1]);
    } else if (ends_with(e.name, "embed_tokens.weight")) {
      // With int8 the table only serves lookups, touching a few rows of the
      // (bf16) checkpoint, unless it has to be converted to float32 first.
      if (dtype_size == 4) bytes += n * dtype_size;
    } else {
      bytes += n * dtype_size;
    }
  }
  if (int8 && t.tie_word_embeddings) bytes += quantized_matrix_bytes(quant, t.vocab_size, t.hidden_size);  // the quantized lm_head
  return bytes;
}

int64_t vision_weight_bytes(const ModelConfig& cfg, int64_t dtype_size, WeightQuant quant) {
  // Quantized sessions run these in int8 (vision/vision_int8.h); everything
  // else is held in the compute dtype, as the module holds it all.
  const std::set<std::string> int8_names = vision_int8_weight_names(cfg.vision);
  const std::string prefix = "model.visual.";
  int64_t bytes = 0;
  for (const ExpectedTensor& e : expected_tensors(cfg)) {
    if (!starts_with(e.name, prefix)) continue;
    const bool int8 = quant != WeightQuant::None && int8_names.count(e.name.substr(prefix.size())) > 0;
    bytes += int8 ? int8_matrix_bytes(e.shape[0], e.shape[1]) : element_count(e.shape) * dtype_size;
  }
  return bytes;
}

// Prefilling `tokens` new tokens: the layer workspace, the hidden states and
// float32 norms, and one block of attention scores (float32, then softmax,
// then the compute dtype) over the whole context.
int64_t prefill_bytes(const TextConfig& t, int64_t tokens, int64_t max_context, int64_t s) {
  const int64_t q_dim = t.num_attention_heads * t.head_dim, kv_dim = t.num_key_value_heads * t.head_dim;
  const int64_t workspace = tokens * (2 * q_dim + 2 * kv_dim + 2 * t.hidden_size + 2 * t.intermediate_size) * s;
  const int64_t hidden_states = 4 * tokens * t.hidden_size * kFloatBytes;
  const int64_t attention =
      t.num_attention_heads * std::min(kQueryBlock, tokens) * max_context * (2 * kFloatBytes + s);
  return workspace + hidden_states + attention;
}

}  // namespace

MemoryEstimate estimate_session_memory(const ModelConfig& cfg, const MemoryOptions& opts) {
  const int64_t s = dtype_bytes(opts);
  const TextConfig& t = cfg.text;
  MemoryEstimate e;
  e.text_weights = text_weight_bytes(cfg, s, opts.quant);
  e.kv_cache = t.num_hidden_layers * 2 * t.num_key_value_heads * opts.max_context * t.head_dim * s;
  e.vision_weights = vision_weight_bytes(cfg, s, opts.quant);
  e.runtime = kRuntimeBytes;
  return e;
}

int64_t estimate_image_memory(const ModelConfig& cfg, const MemoryOptions& opts, const std::vector<ImageGrid>& grids) {
  if (grids.empty()) return 0;
  const VisionConfig& v = cfg.vision;
  const int64_t s = dtype_bytes(opts);
  int64_t patches = 0, largest = 0;
  for (const ImageGrid& g : grids) {
    patches += g.patches();
    largest = std::max(largest, g.patches());
  }
  const int64_t merge = v.spatial_merge_size * v.spatial_merge_size;
  const int64_t tokens = patches / merge;
  const int64_t hidden = v.hidden_size, taps = int64_t(v.deepstack_visual_indexes.size());

  // Normalized pixels: the preprocessed images and the tensor stacking them.
  const int64_t patch_dim = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size;
  const int64_t pixels = 2 * patches * patch_dim * kFloatBytes;
  // Inside a block, during attention: the block input, the residual stream,
  // the normed rows, qkv, the split q/k/v, the attention output, its
  // projection and the pending MLP output (12 rows of `hidden`), or in the MLP
  // the four of them plus the intermediate rows; the deepstack taps stay.
  const int64_t block_rows = std::max(12 * hidden, 4 * hidden + v.intermediate_size) + taps * hidden;
  const int64_t tower = patches * block_rows * s;
  // Each thread holds one block of scores of the largest image (float32 to be safe).
  const int64_t attention = int64_t(threads_of(opts)) * std::min(kQueryBlock, largest) * largest * kFloatBytes;
  // The mergers: normed and fc1 rows of every merge window.
  const int64_t mergers = 2 * patches * hidden * s;
  // The merged features and the deepstack features, alive until the prefill ends.
  const int64_t features = (1 + taps) * tokens * v.out_hidden_size * s;
  const int64_t prefill = prefill_bytes(cfg.text, tokens, opts.max_context, s);
  return pixels + features + std::max({tower + attention, mergers, prefill});
}

std::string format_bytes(int64_t bytes) {
  if (bytes >= kGiB) return fmt::format("{:.1f} GB", double(bytes) / double(kGiB));
  return fmt::format("{} MB", (bytes + kMiB - 1) / kMiB);
}

int64_t parse_mem_available(const std::string& meminfo_text) {
  std::istringstream in(meminfo_text);
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

int64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  if (!f) return 0;
  std::stringstream text;
  text << f.rdbuf();
  return parse_mem_available(text.str());
}

MemoryBudget::MemoryBudget(const ModelConfig& cfg, const MemoryOptions& opts, int64_t limit_mb)
    : cfg_(cfg), opts_(opts), session_(estimate_session_memory(cfg, opts)) {
  if (limit_mb < 0) throw Error(fmt::format("--max-memory must not be negative, got {}", limit_mb));
  if (limit_mb > 0) {
    limit_bytes_ = limit_mb * kMiB;
    limit_text_ = fmt::format("--max-memory is {} MB", limit_mb);
  } else {
    limit_bytes_ = mem_available_bytes();  // 0 (unknown): nothing is refused
    limit_text_ = fmt::format("only {} MB is available (MemAvailable; --max-memory MB sets the limit)",
                              limit_bytes_ / kMiB);
  }
  std::vector<std::string> advice;
  // Only what would make a real difference.
  const int64_t weights = session_.text_weights + session_.vision_weights;
  if (opts.dtype == ComputeDtype::F32 && weights * 4 >= session_.total()) advice.push_back("--dtype bf16");
  if (opts.quant == WeightQuant::None && session_.text_weights * 4 >= session_.total()) advice.push_back("--quant int8");
  if (session_.kv_cache * 8 >= session_.total()) advice.push_back("a smaller --max-context");
  std::string text = advice.empty() ? "" : "use ";
  for (size_t i = 0; i < advice.size(); ++i)
    text += (i == 0 ? "" : i + 1 == advice.size() ? " or " : ", ") + advice[i];
  check(session_, text.empty() ? "free some memory or raise the limit" : text);
}

void MemoryBudget::check_images(const std::vector<ImageGrid>& grids) const {
  MemoryEstimate need = session_;
  need.images = estimate_image_memory(cfg_, opts_, grids);
  check(need, "lower --max-pixels or send fewer images at once");
}

void MemoryBudget::check_batch(int64_t sequences) const {
  MemoryEstimate need = session_;
  need.kv_cache = session_.kv_cache * (1 + std::max<int64_t>(sequences, 0));  // the conversation's cache, plus one each
  check(need, fmt::format("use a smaller --batch than {} or a smaller --max-context", sequences));
}

void MemoryBudget::check(const MemoryEstimate& need, const std::string& advice) const {
  if (limit_bytes_ <= 0 || need.total() <= limit_bytes_) return;
  std::string parts = fmt::format("{}{} weights {}", name_of(opts_.dtype), is_quantized(opts_) ? std::string("/") + name_of(opts_.quant) : "",
                                  format_bytes(need.text_weights + need.vision_weights));
  parts += " + KV cache " + format_bytes(need.kv_cache);
  if (need.images > 0) parts += " + images " + format_bytes(need.images);
  parts += " + runtime " + format_bytes(need.runtime);
  throw Error(fmt::format("the model needs about {} ({}) but {}: {}", format_bytes(need.total()), parts,
                          limit_text_, advice));
}

}  // namespace qvl
