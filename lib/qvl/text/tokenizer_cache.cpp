#include "qvl/text/tokenizer_cache.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstring>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/prompt_entry.h"  // checksum64
#include "qvl/io/safetensors_writer.h"  // write_file_atomically
#include "qvl/text/tokenizer.h"

namespace qvl {
namespace {

constexpr char kMagic[8] = {'Q', 'V', 'L', 'T', 'O', 'K', '\r', '\n'};
constexpr size_t kChecksumFrom = 16;  // the checksum covers everything after itself and the magic
constexpr uint32_t kMaxIds = 1u << 24;  // as the JSON parse allows

template <class T>
void append(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
void append_array(std::string& out, const std::vector<T>& v) {
  if (!v.empty()) out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Reads fields in order; running past the end is damage.
class Cursor {
 public:
  Cursor(const uint8_t* at, const uint8_t* end, const std::string& path) : at_(at), end_(end), path_(path) {}
  template <class T>
  T value() {
    T v;
    bytes(&v, sizeof v);
    return v;
  }
  template <class T>
  void array(std::vector<T>& out, size_t n) {
    if (n > size_t(end_ - at_) / sizeof(T)) damaged("truncated");  // before allocating for it
    out.resize(n);
    bytes(out.data(), n * sizeof(T));
  }
  void bytes(void* out, size_t n) {
    if (n > size_t(end_ - at_)) damaged("truncated");
    if (n > 0) std::memcpy(out, at_, n);
    at_ += n;
  }
  bool at_end() const { return at_ == end_; }
  [[noreturn]] void damaged(const char* what) const {
    throw Error(fmt::format("{}: tokenizer cache is damaged ({})", path_, what));
  }

 private:
  const uint8_t* at_;
  const uint8_t* end_;
  const std::string& path_;
};

bool span_fits(const ByteSpan& s, size_t blob) { return s.start <= blob && s.length <= blob - s.start; }

}  // namespace

std::string tokenizer_cache_path(const std::string& cache_dir, uint64_t json_checksum) {
  return fmt::format("{}/tokenizer-{:016x}-v{}.bin", cache_dir, json_checksum, kTokenizerCacheVersion);
}

std::string encode_tokenizer_cache(const TokenizerTables& t, uint64_t json_checksum, uint64_t json_size) {
  std::string out(kMagic, sizeof kMagic);
  append(out, uint64_t(0));  // checksum, below
  append(out, uint64_t(0));  // file size, below
  append(out, kTokenizerCacheVersion);
  append(out, uint32_t(0));
  append(out, json_checksum);
  append(out, json_size);
  append(out, uint32_t(t.ids()));
  append(out, uint32_t(t.blob.size()));
  append(out, uint32_t(t.merges.size()));
  append(out, uint32_t(t.added.size()));
  append(out, uint32_t(t.normalize_nfc ? 1 : 0));
  out += t.blob;
  append_array(out, t.span);
  append_array(out, t.vocab_span);
  append_array(out, t.flags);
  out.append(reinterpret_cast<const char*>(t.byte_tokens.data()), sizeof t.byte_tokens);
  append_array(out, t.merges);
  for (const auto& [content, id] : t.added) {
    append(out, int32_t(id));
    append(out, uint32_t(content.size()));
    out += content;
  }
  const uint64_t size = out.size();
  std::memcpy(out.data() + 16, &size, sizeof size);
  const uint64_t checksum = checksum64(out.data() + kChecksumFrom, out.size() - kChecksumFrom);
  std::memcpy(out.data() + 8, &checksum, sizeof checksum);
  return out;
}

TokenizerTables decode_tokenizer_cache(const uint8_t* data, size_t size, uint64_t json_checksum, uint64_t json_size,
                                       const std::string& path) {
  if (size < 48 || std::memcmp(data, kMagic, sizeof kMagic) != 0)
    throw Error(path + ": not a tokenizer cache (no magic)");
  Cursor c(data + 8, data + size, path);
  const uint64_t checksum = c.value<uint64_t>();
  if (c.value<uint64_t>() != size) c.damaged("its size is not the one recorded");
  const uint32_t version = c.value<uint32_t>();
  c.value<uint32_t>();
  if (version != kTokenizerCacheVersion)
    throw Error(fmt::format("{}: tokenizer cache has format version {}, qvl reads {}", path, version,
                            kTokenizerCacheVersion));
  if (checksum64(data + kChecksumFrom, size - kChecksumFrom) != checksum) c.damaged("checksum mismatch");
  if (c.value<uint64_t>() != json_checksum || c.value<uint64_t>() != json_size)
    throw Error(path + ": tokenizer cache was made from another tokenizer.json");

  // The checksum says the file is as written; the checks below keep a file
  // written by a broken or hostile hand from indexing out of bounds.
  TokenizerTables t;
  const uint32_t ids = c.value<uint32_t>(), blob = c.value<uint32_t>(), merges = c.value<uint32_t>(),
                 added = c.value<uint32_t>(), nfc = c.value<uint32_t>();
  if (ids == 0 || ids > kMaxIds || blob > size || merges > size || added > size || nfc > 1)
    c.damaged("impossible counts");
  t.normalize_nfc = nfc == 1;
  t.blob.resize(blob);
  c.bytes(t.blob.data(), blob);
  c.array(t.span, ids);
  c.array(t.vocab_span, ids);
  c.array(t.flags, ids);
  c.bytes(t.byte_tokens.data(), sizeof t.byte_tokens);
  c.array(t.merges, merges);
  for (size_t id = 0; id < ids; ++id)
    if (!span_fits(t.span[id], blob) || !span_fits(t.vocab_span[id], blob) || t.flags[id] > 7)
      c.damaged("a token outside the table");
  auto valid_id = [&](TokenId id) { return id >= 0 && uint32_t(id) < ids; };
  for (TokenId id : t.byte_tokens)
    if (!valid_id(id)) c.damaged("a byte token outside the table");
  for (const BpeMerge& m : t.merges)
    if (!valid_id(m.left) || !valid_id(m.right) || !valid_id(m.merged)) c.damaged("a merge outside the table");
  t.added.reserve(added);
  for (uint32_t i = 0; i < added; ++i) {
    const TokenId id = c.value<int32_t>();
    const uint32_t length = c.value<uint32_t>();
    if (!valid_id(id) || length == 0 || length > size) c.damaged("an added token outside the table");
    std::string content(length, '\0');
    c.bytes(content.data(), length);
    t.added.emplace_back(std::move(content), id);
  }
  if (!c.at_end()) c.damaged("bytes after the end");
  return t;
}

Tokenizer Tokenizer::load_from_model_dir(const std::string& dir, const std::string& cache_dir,
                                         TokenizerCacheUse* use) {
  const std::string path = dir + "/tokenizer.json";
  // Mapped, not read: with the cache the JSON is only checksummed, and copying
  // its ~11 MB into fresh memory costs a page fault per 4 KiB (on a VM that
  // shadows page tables ~15-20 us each: 40-60 ms of the tokenizer's load).
  MappedFile json;
  try {
    json = MappedFile(path);
    if (int64_t(json.size()) > kMaxTextFileBytes)
      throw Error(fmt::format("file is {} bytes, over the limit of {} bytes", json.size(), kMaxTextFileBytes));
  } catch (const Error& e) {
    throw Error(fmt::format("{} is missing or unreadable ({}): the model folder needs the tokenizer.json of "
                            "Qwen/Qwen3-VL-2B-Instruct",
                            path, e.what()));
  }
  auto text = [&] {
    return json.size() == 0 ? std::string() : std::string(reinterpret_cast<const char*>(json.data()), json.size());
  };
  auto report = [&](TokenizerCacheUse u) {
    if (use) *use = u;
  };
  if (cache_dir.empty()) {
    report(TokenizerCacheUse::kOff);
    return parse(text(), path);
  }
  const uint64_t json_checksum = checksum64(json.data(), json.size());
  const std::string cache_path = tokenizer_cache_path(cache_dir, json_checksum);
  if (::access(cache_path.c_str(), R_OK) == 0) {
    try {
      const MappedFile file(cache_path);
      TokenizerTables tables = decode_tokenizer_cache(file.data(), file.size(), json_checksum, json.size(), cache_path);
      report(TokenizerCacheUse::kRead);
      return from_tables(std::move(tables));
    } catch (const Error&) {
      // Damaged or foreign: parse the JSON and replace it below.
    }
  }
  VocabIndex index;
  TokenizerTables tables = tables_from_json(text(), path, &index);
  try {
    write_file_atomically(cache_path, encode_tokenizer_cache(tables, json_checksum, json.size()));
    report(TokenizerCacheUse::kWritten);
  } catch (const Error&) {  // a read-only folder, a full disk: the next load parses again
    report(TokenizerCacheUse::kNotWritten);
  }
  return from_tables(std::move(tables), &index);
}

}  // namespace qvl
