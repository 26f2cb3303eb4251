#include "qvl/kernels/int4_cache.h"

#include <fmt/core.h>

#include <utility>
#include <vector>

#include "qvl/error.h"
#include "qvl/kernels/cache_file.h"

namespace qvl::kernels {

namespace {

constexpr char kMagic[8] = {'Q', 'V', 'L', 'I', 'N', 'T', '4', '\n'};
constexpr uint32_t kVersion = 2;  // 2: checksums (cache_file.h)

}  // namespace

void write_int4_cache(const std::string& path, const std::string& tag,
                      const std::vector<std::pair<std::string, Int4Matrix>>& matrices) {
  std::vector<cache_file::MatrixBlocks> blocks;
  for (const auto& [name, m] : matrices) {
    validate_int4_layout(m, fmt::format("int4 cache entry '{}'", name));
    blocks.push_back({name, {m.rows, m.cols, m.padded_cols, m.group_size},
                      m.levels, m.level_bytes(), m.params, m.param_bytes()});
  }
  cache_file::write_matrix_file(path, kMagic, kVersion, tag, blocks);
}

Int4Cache::Int4Cache(const std::string& path) : file_(path) {
  cache_file::MatrixFileHeader header = cache_file::read_matrix_file(file_, "int4", kMagic, kVersion);
  tag_ = std::move(header.tag);
  std::vector<std::pair<uint64_t, uint64_t>> block_bytes;
  for (const cache_file::MatrixEntry& e : header.entries) {
    Int4Matrix m;
    m.rows = e.shape.rows;
    m.cols = e.shape.cols;
    m.padded_cols = e.shape.padded_cols;
    m.group_size = e.shape.group_size;
    const std::string what = fmt::format("{}: matrix '{}'", path, e.name);
    validate_int4_layout(m, what);
    m.levels = reinterpret_cast<const uint8_t*>(cache_file::block(file_, what, e.values_offset, m.level_bytes()));
    m.params = reinterpret_cast<const uint16_t*>(cache_file::block(file_, what, e.params_offset, m.param_bytes()));
    if (!matrices_.emplace(e.name, m).second) throw Error(fmt::format("{} appears twice", what));
    block_bytes.emplace_back(m.level_bytes(), m.param_bytes());
  }
  cache_file::verify_blocks(file_, header.entries, block_bytes);
}

Int4Cache::Int4Cache(std::string tag, std::vector<std::pair<std::string, QuantizedInt4Matrix>> matrices) : tag_(std::move(tag)) {
  owned_.reserve(matrices.size());
  for (auto& [name, m] : matrices) {
    owned_.push_back(std::move(m));  // the view keeps pointing at the moved storage
    if (!matrices_.emplace(name, owned_.back().view()).second)
      throw Error(fmt::format("int4 matrices: '{}' appears twice", name));
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
