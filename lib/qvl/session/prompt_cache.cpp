#include "qvl/session/prompt_cache.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <fmt/core.h>

#include "qvl/decoder/decoder.h"
#include "qvl/error.h"
#include "qvl/io/prompt_entry.h"

namespace qvl {
namespace {

KvLayout layout_of(const Decoder& decoder) {
  const TextConfig& c = decoder.config();
  return {c.num_hidden_layers, c.num_key_value_heads, c.head_dim, int64_t(c10::elementSize(decoder.dtype()))};
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

PromptCache::PromptCache(std::string dir, int64_t max_bytes, std::function<void(const std::string&)> on_note)
    : dir_(std::move(dir), max_bytes), on_note_(std::move(on_note)) {}

void PromptCache::note(const std::string& text) const {
  if (on_note_) on_note_(text);
}

std::optional<int64_t> PromptCache::load(const PromptPrefix& prefix, Decoder& decoder, int64_t sequence) {
  const std::string path = dir_.path_for(prefix.key);
  if (!file_exists(path)) return std::nullopt;
  try {
    const PromptEntryFile entry(path);
    const PromptEntryHeader& h = entry.header();
    // The file name is a hash of the key: a different key inside is a collision or a copied file.
    if (h.key != prefix.key) throw Error(path + ": prompt cache entry was made for another model or prompt");
    if (h.tokens != prefix.tokens) throw Error(path + ": prompt cache entry holds other prompt tokens");
    if (!(h.layout == layout_of(decoder))) throw Error(path + ": prompt cache entry has another layout");
    const int64_t n = int64_t(h.tokens.size());
    if (h.next_position <= 0 || h.next_position > n)
      throw Error(fmt::format("{}: prompt cache entry's next position {} is impossible for {} tokens", path,
                              h.next_position, n));
    const KvLayout& l = h.layout;
    std::vector<at::Tensor> keys, values;
    for (int64_t layer = 0; layer < l.layers; ++layer) {
      // Views of the mapping: restore() copies them into the cache.
      keys.push_back(at::from_blob(const_cast<uint8_t*>(entry.block(layer, 0)), {l.kv_heads, n, l.head_dim},
                                   at::TensorOptions().dtype(decoder.dtype())));
      values.push_back(at::from_blob(const_cast<uint8_t*>(entry.block(layer, 1)), {l.kv_heads, n, l.head_dim},
                                     at::TensorOptions().dtype(decoder.dtype())));
    }
    decoder.restore(sequence, keys, values);
    dir_.touch(path);
    return h.next_position;
  } catch (const Error& e) {
    note(std::string("prompt cache: ") + e.what() + "; recomputing it");
    return std::nullopt;
  }
}

bool PromptCache::store(const PromptPrefix& prefix, const Decoder& decoder, int64_t sequence) {
  if (write_failed_) return false;
  PromptEntryHeader header;
  header.key = prefix.key;
  header.tokens = prefix.tokens;
  header.next_position = prefix.next_position;
  header.layout = layout_of(decoder);
  const int64_t n = int64_t(prefix.tokens.size());
  // One contiguous run per head of each layer's keys and values: no copy of the cache.
  std::vector<at::Tensor> blocks;
  for (int64_t layer = 0; layer < header.layout.layers; ++layer)
    for (at::Tensor t : {decoder.cached_keys(layer, n, sequence), decoder.cached_values(layer, n, sequence)}) {
      if (t.stride(2) != 1 || t.stride(1) != t.size(2)) t = t.contiguous();
      blocks.push_back(t);
    }
  std::vector<ByteRange> payload;
  for (const at::Tensor& t : blocks) {
    const size_t head_bytes = size_t(t.size(1) * t.size(2)) * t.element_size();
    for (int64_t head = 0; head < t.size(0); ++head)
      payload.push_back({static_cast<const uint8_t*>(t.data_ptr()) + head * t.stride(0) * t.element_size(),
                         head_bytes});
  }
  const std::string path = dir_.path_for(prefix.key);
  std::string error;
  const int64_t size = int64_t(header.payload_bytes()) + 4096 + int64_t(header.key.size() + 4 * n);
  if (size > dir_.max_bytes()) {  // this entry only: a smaller one may still fit
    note(fmt::format("prompt cache: not saved: the entry ({} MB) is larger than --prompt-cache-max-mb ({})",
                     size >> 20, dir_.max_bytes() >> 20));
    return false;
  }
  if (dir_.publish(path, size, [&](const std::string& tmp) { write_prompt_entry(tmp, header, payload); }, &error))
    return true;
  write_failed_ = true;  // the folder cannot be written: said once, not at every answer
  note("prompt cache: not saved: " + error);
  return false;
}

}  // namespace qvl
