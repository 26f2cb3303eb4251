#include "qvl/model/synth.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/safetensors_writer.h"
#include "qvl/model/checkpoint_layout.h"
#include "qvl/model/config.h"
#include "qvl/io/paths.h"

namespace qvl {
namespace {

// ---- random values -------------------------------------------------------

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// xoshiro256**: fast, and good enough for weights nobody trains.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    for (uint64_t& word : s_) word = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Approximately standard normal: the sum of four 16-bit uniforms (Irwin-Hall)
  // has the right mean and variance, is bounded by ±3.46 and costs no libm call.
  float normal() {
    const uint64_t r = next();
    const int64_t sum = int64_t(r & 0xffff) + int64_t((r >> 16) & 0xffff) + int64_t((r >> 32) & 0xffff) +
                        int64_t(r >> 48);
    // Each 16-bit draw u stands for (u + 0.5) / 65536, so the sum's mean is 2.
    constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(12 / 4) turns variance 4/12 into 1
    return float(sum + 2 - 131072) * kScale;
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// value = offset + scale * normal. The spread follows the reference's own
// random tiny checkpoint (goldens.json -> tiny_init).
struct Init {
  float offset = 0.0f;
  float scale = 0.0f;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Init init_for(const ExpectedTensor& t) {
  if (ends_with(t.name, "embed_tokens.weight")) return {0.0f, 0.08f};
  // Comparable to the patch embedding's output, so positions actually matter.
  if (ends_with(t.name, "pos_embed.weight")) return {0.0f, 0.5f};
  if (ends_with(t.name, ".bias")) return {0.0f, 0.1f};
  if (t.shape.size() == 1) return {1.0f, 0.2f};  // RMSNorm / LayerNorm scales
  int64_t fan_in = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) fan_in *= t.shape[i];
  return {0.0f, float(1.0 / std::sqrt(double(fan_in)))};
}

uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even; no NaN or Inf can occur here
  return uint16_t(u >> 16);
}

// Streams one tensor's bytes into the writer. The stream depends only on the
// seed and the tensor's name, so shard layout and dtype never change a value.
void write_tensor(SafetensorsWriter& out, uint64_t seed, const ExpectedTensor& t, DType dtype) {
  uint64_t stream_seed = seed ^ fnv1a64(t.name);
  Xoshiro256 rng(splitmix64(stream_seed));
  const Init init = init_for(t);
  constexpr size_t kChunk = size_t(1) << 20;
  std::vector<uint16_t> bf16(kChunk);
  std::vector<uint32_t> f32(dtype == DType::F32 ? kChunk : 0);
  for (int64_t left = element_count(t.shape); left > 0;) {
    const size_t n = size_t(std::min<int64_t>(left, int64_t(kChunk)));
    for (size_t i = 0; i < n; ++i) bf16[i] = to_bf16_bits(init.offset + init.scale * rng.normal());
    if (dtype == DType::F32) {
      for (size_t i = 0; i < n; ++i) f32[i] = uint32_t(bf16[i]) << 16;
      out.append(f32.data(), n * 4);
    } else {
      out.append(bf16.data(), n * 2);
    }
    left -= int64_t(n);
  }
}

// ---- the output folder ---------------------------------------------------

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw Error("cannot read output folder '" + dir + "': " + std::strerror(errno));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

void make_dirs(const std::string& dir) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
      throw Error("cannot create output folder '" + dir + "': " + std::strerror(errno));
  }
  if (!is_directory(dir)) throw Error("cannot create output folder '" + dir + "': a file of that name is in the way");
}

// Leaves an empty folder or, with force, one whose old checkpoint is gone, so
// no stale shard or index can be mistaken for part of the new one.
void prepare_out_dir(const std::string& dir, bool force) {
  if (!path_exists(dir)) return make_dirs(dir);
  if (!is_directory(dir)) throw Error("output '" + dir + "' exists and is not a folder");
  if (::access(dir.c_str(), W_OK) != 0) throw Error("output folder '" + dir + "' is not writable");
  const std::vector<std::string> names = list_dir(dir);
  if (names.empty()) return;
  if (!force) throw Error("output folder '" + dir + "' is not empty (pass --force to overwrite its checkpoint)");
  static const std::regex kOldWeights(R"(model(-\d+-of-\d+)?\.safetensors(\.index\.json)?(\.tmp)?)");
  ::unlink((dir + "/model.safetensors.index.json").c_str());  // first: the index is what makes a folder a checkpoint
  for (const std::string& name : names)
    if (std::regex_match(name, kOldWeights)) ::unlink((dir + "/" + name).c_str());
}

void require_free_space(const std::string& dir, uint64_t bytes) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) return;  // cannot tell: the writes will report a full disk
  const uint64_t free_bytes = uint64_t(fs.f_bavail) * fs.f_frsize;
  if (free_bytes < bytes)
    throw Error("not enough disk space in '" + dir + "': the checkpoint needs " + std::to_string(bytes / 1000000) +
                " MB, " + std::to_string(free_bytes / 1000000) + " MB are free");
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string shard_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

// Greedy packing in tensor order, as save_pretrained does: a shard closes when
// the next tensor would take it past the limit.
std::vector<std::vector<ExpectedTensor>> plan_shards(const std::vector<ExpectedTensor>& tensors, DType dtype,
                                                     uint64_t shard_size) {
  std::vector<std::vector<ExpectedTensor>> shards(1);
  uint64_t current = 0;
  for (const ExpectedTensor& t : tensors) {
    const uint64_t bytes = uint64_t(element_count(t.shape)) * dtype_size(dtype);
    if (!shards.back().empty() && current + bytes > shard_size) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(t);
    current += bytes;
  }
  return shards;
}

// A failed run into a folder it created removes what it wrote, leaving no
// half-made folder behind. A pre-existing folder is left as is: its files
// may not all be ours.
class Cleanup {
 public:
  explicit Cleanup(std::string dir, bool created_dir) : dir_(std::move(dir)), created_dir_(created_dir) {}
  ~Cleanup() {
    if (done_ || !created_dir_) return;
    for (const std::string& p : written_) ::unlink(p.c_str());
    ::rmdir(dir_.c_str());
  }
  void wrote(const std::string& path) { written_.push_back(path); }
  void keep() { done_ = true; }

 private:
  std::string dir_;
  bool created_dir_;
  bool done_ = false;
  std::vector<std::string> written_;
};

void write_text(const std::string& path, const std::string& contents, Cleanup& cleanup) {
  cleanup.wrote(path);
  write_file_atomically(path, contents);
}

// Files that make a weights folder a usable model folder besides config.json.
const char* const kSupportFiles[] = {
    "tokenizer.json",           "tokenizer_config.json",          "vocab.json",
    "merges.txt",               "special_tokens_map.json",        "added_tokens.json",
    "chat_template.jinja",      "chat_template.json",             "preprocessor_config.json",
    "video_preprocessor_config.json", "generation_config.json",
};
const char* const kEssentialFiles[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                       "preprocessor_config.json", "generation_config.json"};

// The config's own folder wins: its processor and generation settings belong
// to the model being imitated. The tokenizer folder fills the gaps.
void copy_support_files(const std::string& config_dir, const std::string& tokenizer_from, const std::string& out_dir,
                        SynthResult& result, Cleanup& cleanup) {
  for (const char* name : kSupportFiles) {
    std::string source;
    for (const std::string& dir : {config_dir, tokenizer_from})
      if (source.empty() && !dir.empty() && is_regular_file(dir + "/" + name)) source = dir;
    if (source.empty()) continue;
    write_text(out_dir + "/" + name, read_text_file(source + "/" + name), cleanup);
    result.copied_files.push_back(std::string(name) + " <- " + source);
  }
  for (const char* name : kEssentialFiles)
    if (!is_regular_file(out_dir + "/" + name)) result.missing_files.push_back(name);
}

}  // namespace

SynthResult synthesize_checkpoint(const SynthOptions& opts, const ShardWritten& on_shard) {
  if (opts.dtype != DType::BF16 && opts.dtype != DType::F32)
    throw Error(std::string("synth writes BF16 or F32 weights, not ") + dtype_name(opts.dtype));
  if (opts.shard_size == 0) throw Error("shard size must be positive");
  if (!opts.tokenizer_from.empty() && !is_directory(opts.tokenizer_from))
    throw Error("tokenizer folder '" + opts.tokenizer_from + "' not found");
  const std::string config_text = read_text_file(opts.config_path);
  const ModelConfig cfg = parse_model_config(config_text, opts.config_path);
  const std::vector<ExpectedTensor> tensors = expected_tensors(cfg);

  SynthResult result;
  uint64_t data_bytes = 0;
  for (const ExpectedTensor& t : tensors) {
    result.parameters += element_count(t.shape);
    data_bytes += uint64_t(element_count(t.shape)) * dtype_size(opts.dtype);
  }
  result.tensors = int64_t(tensors.size());

  const bool created_dir = !path_exists(opts.out_dir);
  prepare_out_dir(opts.out_dir, opts.force);
  Cleanup cleanup(opts.out_dir, created_dir);
  require_free_space(opts.out_dir, data_bytes);

  const auto shards = plan_shards(tensors, opts.dtype, opts.shard_size);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    std::vector<TensorEntry> entries;
    for (const ExpectedTensor& t : shards[s]) {
      entries.push_back({t.name, opts.dtype, t.shape});
      weight_map[t.name] = name;
    }
    const std::string path = opts.out_dir + "/" + name;
    cleanup.wrote(path);
    SafetensorsWriter writer(path, entries, {{"format", "pt"}});
    for (const ExpectedTensor& t : shards[s]) write_tensor(writer, opts.seed, t, opts.dtype);
    writer.finish();
    struct stat st {};
    const uint64_t file_bytes = ::stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : writer.data_bytes();
    result.bytes += file_bytes;
    result.shards.push_back(name);
    if (on_shard) on_shard(name, file_bytes);
  }

  write_text(opts.out_dir + "/config.json", config_text, cleanup);
  copy_support_files(folder_of(opts.config_path), opts.tokenizer_from, opts.out_dir, result, cleanup);

  // Written last: until the index exists the folder does not load as a checkpoint.
  nlohmann::json index = {
      {"metadata", {{"total_parameters", result.parameters}, {"total_size", data_bytes}}},
      {"weight_map", weight_map},
  };
  write_text(opts.out_dir + "/model.safetensors.index.json", index.dump(2) + "\n", cleanup);
  cleanup.keep();
  return result;
}

}  // namespace qvl
