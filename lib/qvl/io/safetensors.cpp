#include "qvl/io/safetensors.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "qvl/error.h"
#include "qvl/io/paths.h"

namespace qvl {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kDTypes[] = {
    {DType::BF16, "BF16", 2}, {DType::F16, "F16", 2}, {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},   {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},   {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

// The header is at most this large; real checkpoints use well under 1 MB.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

}  // namespace

size_t dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.size;
  return 0;
}

const char* dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return d.name;
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  for (const auto& d : kDTypes)
    if (s == d.name) {
      *out = d.type;
      return true;
    }
  return false;
}

void TensorView::read_bytes(size_t offset, size_t n, void* dst) const {
  if (offset > nbytes || n > nbytes - offset)
    throw Error(file + ": tensor '" + name + "': bytes [" + std::to_string(offset) + ", " +
                std::to_string(offset + n) + ") are outside its " + std::to_string(nbytes));
  if (!source) throw Error("tensor '" + name + "' has no file to read from");
  source->read_into(size_t(data - source->data()) + offset, n, dst);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path, "checkpoint") {
  const size_t size = file_.size();
  if (size < 8) throw Error(path + ": not a safetensors file (shorter than its 8-byte header length)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_.data(), 8);  // little-endian on every supported host
  if (header_len > kMaxHeaderBytes || header_len > size - 8)
    throw Error(path + ": header length " + std::to_string(header_len) +
                " does not fit in the file (truncated or not safetensors)");
  const char* hdr = reinterpret_cast<const char*>(file_.data() + 8);
  // nlohmann keeps only the last of duplicate keys, so names are checked for
  // uniqueness while parsing, at the top level of the object.
  std::set<std::string> seen_names;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
      if (!seen_names.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(hdr, hdr + header_len, on_event, false);
  if (!duplicate.empty()) throw Error(path + ": tensor '" + duplicate + "' appears twice in the header");
  if (j.is_discarded() || !j.is_object()) throw Error(path + ": header is not a JSON object");

  const uint8_t* data_start = file_.data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // for the overlap check
  std::vector<std::string> range_names;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) throw Error(path + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& t = *it;
    auto bad = [&](const std::string& what) { return Error(path + ": tensor '" + name + "': " + what); };
    if (!t.is_object()) throw bad("entry is not an object");
    if (!t.contains("dtype") || !t["dtype"].is_string()) throw bad("missing dtype");
    if (!t.contains("shape") || !t["shape"].is_array()) throw bad("missing shape");
    if (!t.contains("data_offsets") || !t["data_offsets"].is_array() || t["data_offsets"].size() != 2)
      throw bad("missing data_offsets");
    TensorView v;
    v.name = name;
    v.file = path;
    if (!parse_dtype(t["dtype"].get<std::string>(), &v.dtype))
      throw bad("unsupported dtype " + t["dtype"].get<std::string>());
    uint64_t elems = 1;
    for (const auto& d : t["shape"]) {
      if (!d.is_number_unsigned()) throw bad("shape has a negative or non-integer dimension");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && elems > (uint64_t(1) << 62) / dim) throw bad("shape overflows");
      elems *= dim;
      v.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto& off = t["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) throw bad("data_offsets are not integers");
    uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                ") outside the data section of " + std::to_string(data_size) + " bytes (truncated file?)");
    // Compared by division: elems * size can wrap around 2^64 (shape [2^62] of
    // F32 "needs" 0 bytes) and would let a huge tensor claim an empty range.
    const uint64_t element_size = dtype_size(v.dtype);
    if ((end - begin) % element_size != 0 || (end - begin) / element_size != elems)
      throw bad("byte length " + std::to_string(end - begin) + " does not match dtype and shape (" +
                std::to_string(elems) + " elements of " + std::to_string(element_size) + " bytes)");
    v.data = data_start + begin;
    v.nbytes = end - begin;
    v.source = &file_;
    ranges.emplace_back(begin, end);
    range_names.push_back(name);
    // nlohmann's object keeps the last of duplicate keys; duplicates are caught below by count.
    tensors_.emplace(name, std::move(v));
  }
  std::vector<size_t> order(ranges.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    const auto& prev = ranges[order[k - 1]];
    const auto& cur = ranges[order[k]];
    if (cur.first < prev.second && cur.second > cur.first)
      throw Error(path + ": tensor '" + range_names[order[k]] + "' overlaps tensor '" +
                  range_names[order[k - 1]] + "'");
  }
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) throw Error(file_.path() + ": no tensor named '" + name + "'");
  return *t;
}

Checkpoint::Checkpoint(const std::string& model_dir) : dir_(model_dir) {
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  const std::string single_path = model_dir + "/model.safetensors";
  std::vector<std::string> shard_names;
  std::map<std::string, std::string> weight_map;
  if (path_exists(index_path)) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(index_path), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(index_path + ": not a valid index (no weight_map object)");
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) throw Error(index_path + ": weight_map entry '" + it.key() + "' is not a file name");
      std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        throw Error(index_path + ": shard name '" + shard + "' must be a plain file name");
      weight_map[it.key()] = shard;
      if (seen.insert(shard).second) shard_names.push_back(shard);
    }
    std::sort(shard_names.begin(), shard_names.end());
  } else if (path_exists(single_path)) {
    shard_names.push_back("model.safetensors");
  } else {
    throw Error(model_dir + ": no model.safetensors or model.safetensors.index.json");
  }
  for (const auto& s : shard_names) files_.push_back(std::make_unique<SafetensorsFile>(model_dir + "/" + s));
  for (const auto& f : files_) {
    for (const auto& [name, view] : f->tensors()) {
      auto [it, inserted] = index_.emplace(name, &view);
      if (!inserted) throw Error(view.file + ": tensor '" + name + "' also appears in " + it->second->file);
    }
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = index_.find(name);
    if (it == index_.end())
      throw Error(model_dir + "/" + shard + ": tensor '" + name + "' listed in the index is missing (truncated or wrong shard?)");
  }
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) throw Error(dir_ + ": checkpoint has no tensor '" + name + "'");
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

std::string Checkpoint::fingerprint() const {
  // FNV-1a over each shard's header bytes, size and mtime: enough to notice a
  // replaced or modified checkpoint without reading gigabytes of weights.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& f : files_) {
    const auto& m = f->mapping();
    uint64_t header_len = 0;
    std::memcpy(&header_len, m.data(), 8);
    mix(m.data(), 8 + header_len);
    uint64_t size = m.size();
    mix(&size, sizeof size);
    struct stat st {};
    if (::stat(m.path().c_str(), &st) == 0) {
      int64_t mt = st.st_mtim.tv_sec;
      mix(&mt, sizeof mt);
    }
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}


}  // namespace qvl
