#include "qvl/decoder/int8_weights.h"

#include <fmt/format.h>

#include "qvl/decoder/quant_cache.h"
#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"

namespace qvl {
namespace {

// Bump whenever what is quantized, or how, changes: old files then stop matching.
constexpr int kFormatVersion = 1;

// The decoder's tag reads as it always has, so existing caches stay valid.
std::string cache_tag(const std::string& part, const std::string& fingerprint, int64_t group_size) {
  return fmt::format("qvl {} int8 v{}; group {}; weights {}", part, kFormatVersion, group_size, fingerprint);
}

// Why a readable cache does not fit the sources, or "" when it does.
std::string mismatch(const kernels::Int8Cache& cache, const std::string& tag, const std::vector<Int8Source>& sources,
                     int64_t group_size) {
  if (cache.tag() != tag) return fmt::format("it was made for '{}'", cache.tag());
  if (cache.matrices().size() != sources.size())
    return fmt::format("it holds {} matrices, not {}", cache.matrices().size(), sources.size());
  for (const Int8Source& s : sources) {
    const kernels::Int8Matrix* m = cache.find(s.name);
    if (!m) return fmt::format("it has no matrix '{}'", s.name);
    if (m->rows != s.view->shape[0] || m->cols != s.view->shape[1] || m->group_size != group_size)
      return fmt::format("its matrix '{}' is {}x{} in groups of {}, not {}x{} in groups of {}", s.name, m->rows,
                         m->cols, m->group_size, s.view->shape[0], s.view->shape[1], group_size);
  }
  return "";
}

kernels::QuantizedMatrix quantize(const TensorView& view, int64_t group_size) {
  at::Tensor w = tensor_view(view);
  if (w.scalar_type() != at::kBFloat16) w = w.to(at::kBFloat16).contiguous();
  const kernels::Bf16Matrix bf16{static_cast<const uint16_t*>(w.data_ptr()), view.shape[0], view.shape[1]};
  return kernels::quantize_int8(bf16, group_size);
}

QuantBuild<kernels::Int8Cache> build_cache(const std::string& path, const std::string& tag,
                                           const std::vector<Int8Source>& sources, int64_t group_size) {
  std::vector<std::pair<std::string, kernels::QuantizedMatrix>> quantized;
  quantized.reserve(sources.size());
  QuantBuild<kernels::Int8Cache> built;
  for (const Int8Source& s : sources) {
    quantized.emplace_back(s.name, quantize(*s.view, group_size));
    built.bytes += quantized.back().second.view().weight_bytes() + quantized.back().second.view().scale_bytes();
    release_pages(*s.view);
  }
  if (!path.empty()) {
    std::vector<std::pair<std::string, kernels::Int8Matrix>> entries;
    for (const auto& [name, m] : quantized) entries.emplace_back(name, m.view());
    try {
      write_beside_then_rename(path, [&](const std::string& own) { kernels::write_int8_cache(own, tag, entries); });
      return built;
    } catch (const Error& e) {
      built.not_written = e.what();
    }
  }
  built.in_memory = std::make_unique<kernels::Int8Cache>(tag, std::move(quantized));
  return built;
}

}  // namespace

std::string int8_cache_path(const std::string& dir, const std::string& fingerprint, int64_t group_size,
                            const std::string& part) {
  return fmt::format("{}/{}-int8-{}-v{}-g{}.bin", dir, part, fingerprint, kFormatVersion, group_size);
}

std::unique_ptr<kernels::Int8Cache> load_int8_cache(const Checkpoint& ckpt, const std::vector<Int8Source>& sources,
                                                    const std::string& dir, int64_t group_size,
                                                    const NoteCallback& on_note, const std::string& part,
                                                    const std::string& file_part) {
  const std::string fingerprint = ckpt.fingerprint();
  const std::string path =
      dir.empty() ? "" : int8_cache_path(dir, fingerprint, group_size, file_part.empty() ? part : file_part);
  const std::string tag = cache_tag(part, fingerprint, group_size);

  return open_or_build_quant_cache<kernels::Int8Cache>(
      "int8", path, [&](const kernels::Int8Cache& cache) { return mismatch(cache, tag, sources, group_size); },
      [&](const std::string& p) { return build_cache(p, tag, sources, group_size); }, sources.size(), on_note, part);
}

}  // namespace qvl
