#include "qvl/kernels/int4_cache.h"

#include <fmt/core.h>

#include <cstring>

#include "qvl/error.h"
#include "qvl/kernels/cache_file.h"

namespace qvl::kernels {

namespace {

constexpr char kMagic[8] = {'Q', 'V', 'L', 'I', 'N', 'T', '4', '\n'};
constexpr uint32_t kVersion = 1;
using cache_file::align_up;

struct EntryHeader {
  int64_t rows, cols, padded_cols, group_size;
  uint64_t levels_offset, params_offset;
};

}  // namespace

void write_int4_cache(const std::string& path, const std::string& tag,
                      const std::vector<std::pair<std::string, Int4Matrix>>& matrices) {
  uint64_t header_size = sizeof kMagic + 4 + 4 + 8 + tag.size();
  for (const auto& [name, m] : matrices) {
    validate_int4_layout(m, fmt::format("int4 cache entry '{}'", name));
    header_size += 4 + name.size() + sizeof(EntryHeader);
  }
  std::vector<EntryHeader> entries;
  uint64_t offset = align_up(header_size);
  for (const auto& [name, m] : matrices) {
    EntryHeader e{m.rows, m.cols, m.padded_cols, m.group_size, offset, 0};
    offset = align_up(offset + m.level_bytes());
    e.params_offset = offset;
    offset = align_up(offset + m.param_bytes());
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
    const Int4Matrix& m = matrices[i].second;
    out.pad_to(entries[i].levels_offset);
    out.bytes(m.levels, m.level_bytes());
    out.pad_to(entries[i].params_offset);
    out.bytes(m.params, m.param_bytes());
  }
  out.pad_to(offset);
  out.commit();
}

Int4Cache::Int4Cache(const std::string& path) : file_(path) {
  cache_file::Reader in(file_, "int4 cache");
  char magic[sizeof kMagic];
  in.bytes(magic, sizeof magic);
  if (std::memcmp(magic, kMagic, sizeof kMagic) != 0) throw Error(fmt::format("{}: not a qvl int4 cache file", path));
  const auto version = in.value<uint32_t>();
  if (version != kVersion)
    throw Error(fmt::format("{}: int4 cache version {} (this build reads version {})", path, version, kVersion));
  const auto count = in.value<uint32_t>();
  tag_ = in.string(in.value<uint64_t>());
  for (uint32_t i = 0; i < count; ++i) {
    const std::string name = in.string(in.value<uint32_t>());
    const auto e = in.value<EntryHeader>();
    Int4Matrix m;
    m.rows = e.rows;
    m.cols = e.cols;
    m.padded_cols = e.padded_cols;
    m.group_size = e.group_size;
    const std::string what = fmt::format("{}: matrix '{}'", path, name);
    validate_int4_layout(m, what);
    if (!in.fits(e.levels_offset, m.level_bytes()) || !in.fits(e.params_offset, m.param_bytes()))
      throw Error(fmt::format("{} lies outside the file ({} bytes) or is misaligned", what, file_.size()));
    m.levels = file_.data() + e.levels_offset;
    m.params = reinterpret_cast<const uint16_t*>(file_.data() + e.params_offset);
    if (!matrices_.emplace(name, m).second) throw Error(fmt::format("{} appears twice", what));
  }
}

const Int4Matrix* Int4Cache::find(const std::string& name) const {
  const auto it = matrices_.find(name);
  return it == matrices_.end() ? nullptr : &it->second;
}

const Int4Matrix& Int4Cache::get(const std::string& name) const {
  const Int4Matrix* m = find(name);
  if (!m) throw Error(fmt::format("{}: no matrix named '{}'", file_.path(), name));
  return *m;
}

}  // namespace qvl::kernels
