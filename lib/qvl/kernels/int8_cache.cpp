#include "qvl/kernels/int8_cache.h"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "qvl/error.h"
#include "qvl/kernels/cache_file.h"

namespace qvl::kernels {

namespace {

constexpr char kMagic[8] = {'Q', 'V', 'L', 'I', 'N', 'T', '8', '\n'};
constexpr uint32_t kVersion = 1;
using cache_file::align_up;

struct EntryHeader {
  int64_t rows, cols, padded_cols, group_size;
  uint64_t weights_offset, scales_offset;
};

}  // namespace

void write_int8_cache(const std::string& path, const std::string& tag,
                      const std::vector<std::pair<std::string, Int8Matrix>>& matrices) {
  uint64_t header_size = sizeof kMagic + 4 + 4 + 8 + tag.size();
  for (const auto& [name, m] : matrices) {
    validate_int8_layout(m, fmt::format("int8 cache entry '{}'", name));
    header_size += 4 + name.size() + sizeof(EntryHeader);
  }
  std::vector<EntryHeader> entries;
  uint64_t offset = align_up(header_size);
  for (const auto& [name, m] : matrices) {
    EntryHeader e{m.rows, m.cols, m.padded_cols, m.group_size, offset, 0};
    offset = align_up(offset + m.weight_bytes());
    e.scales_offset = offset;
    offset = align_up(offset + m.scale_bytes());
    entries.push_back(e);
  }

  cache_file::Writer out(path);
  out.bytes(kMagic, sizeof kMagic);
  out.value(kVersion);
  out.value(uint32_t(matrices.size()));
  out.value(uint64_t(tag.size()));
  out.bytes(tag.data(), tag.size());
  for (size_t i = 0; i < matrices.size(); ++i) {
    out.value(uint32_t(matrices[i].first.size()));
    out.bytes(matrices[i].first.data(), matrices[i].first.size());
    out.value(entries[i]);
  }
  for (size_t i = 0; i < matrices.size(); ++i) {
    const Int8Matrix& m = matrices[i].second;
    out.pad_to(entries[i].weights_offset);
    out.bytes(m.weights, m.weight_bytes());
    out.pad_to(entries[i].scales_offset);
    out.bytes(m.scales, m.scale_bytes());
  }
  out.pad_to(offset);
  out.commit();
}

Int8Cache::Int8Cache(const std::string& path) : file_(path) {
  cache_file::Reader in(file_, "int8 cache");
  char magic[sizeof kMagic];
  in.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) throw Error(fmt::format("{}: not a qvl int8 cache file", path));
  const auto version = in.value<uint32_t>();
  if (version != kVersion)
    throw Error(fmt::format("{}: int8 cache version {} (this build reads version {})", path, version, kVersion));
  const auto count = in.value<uint32_t>();
  tag_ = in.string(in.value<uint64_t>());
  for (uint32_t i = 0; i < count; ++i) {
    const std::string name = in.string(in.value<uint32_t>());
    const auto e = in.value<EntryHeader>();
    Int8Matrix m;
    m.rows = e.rows;
    m.cols = e.cols;
    m.padded_cols = e.padded_cols;
    m.group_size = e.group_size;
    const std::string what = fmt::format("{}: matrix '{}'", path, name);
    validate_int8_layout(m, what);
    if (!in.fits(e.weights_offset, m.weight_bytes()) || !in.fits(e.scales_offset, m.scale_bytes()))
      throw Error(fmt::format("{} lies outside the file ({} bytes) or is misaligned", what, file_.size()));
    m.weights = reinterpret_cast<const int8_t*>(file_.data() + e.weights_offset);
    m.scales = reinterpret_cast<const float*>(file_.data() + e.scales_offset);
    if (!matrices_.emplace(name, m).second) throw Error(fmt::format("{} appears twice", what));
  }
}

const Int8Matrix* Int8Cache::find(const std::string& name) const {
  const auto it = matrices_.find(name);
  return it == matrices_.end() ? nullptr : &it->second;
}

const Int8Matrix& Int8Cache::get(const std::string& name) const {
  const Int8Matrix* m = find(name);
  if (!m) throw Error(fmt::format("{}: no matrix named '{}'", file_.path(), name));
  return *m;
}

}  // namespace qvl::kernels
