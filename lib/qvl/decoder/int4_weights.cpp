#include "qvl/decoder/int4_weights.h"

#include <fmt/format.h>

#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"

namespace qvl {
namespace {

// Bump whenever what is quantized, or how, changes: old files then stop matching.
constexpr int kFormatVersion = 1;

std::string cache_tag(const std::string& fingerprint) {
  return fmt::format("qvl decoder int4 v{}; group {} with float16 scale and offset; weights {}", kFormatVersion,
                     kernels::kInt4GroupSize, fingerprint);
}

// Why a readable cache does not fit the sources, or "" when it does.
std::string mismatch(const kernels::Int4Cache& cache, const std::string& tag, const std::vector<QuantSource>& sources) {
  if (cache.tag() != tag) return fmt::format("it was made for '{}'", cache.tag());
  if (cache.matrices().size() != sources.size())
    return fmt::format("it holds {} matrices, not {}", cache.matrices().size(), sources.size());
  for (const QuantSource& s : sources) {
    const kernels::Int4Matrix* m = cache.find(s.name);
    if (!m) return fmt::format("it has no matrix '{}'", s.name);
    if (m->rows != s.view->shape[0] || m->cols != s.view->shape[1])
      return fmt::format("its matrix '{}' is {}x{}, not {}x{}", s.name, m->rows, m->cols, s.view->shape[0],
                         s.view->shape[1]);
  }
  return "";
}

kernels::QuantizedInt4Matrix quantize(const TensorView& view) {
  at::Tensor w = tensor_view(view);
  if (w.scalar_type() != at::kBFloat16) w = w.to(at::kBFloat16).contiguous();
  return kernels::quantize_int4({static_cast<const uint16_t*>(w.data_ptr()), view.shape[0], view.shape[1]});
}

QuantBuild<kernels::Int4Cache> build_cache(const std::string& path, const std::string& tag,
                                           const std::vector<QuantSource>& sources) {
  std::vector<std::pair<std::string, kernels::QuantizedInt4Matrix>> quantized;
  quantized.reserve(sources.size());
  QuantBuild<kernels::Int4Cache> built;
  for (const QuantSource& s : sources) {
    quantized.emplace_back(s.name, quantize(*s.view));
    built.bytes += quantized.back().second.view().level_bytes() + quantized.back().second.view().param_bytes();
    release_pages(*s.view);
  }
  if (!path.empty()) {
    std::vector<std::pair<std::string, kernels::Int4Matrix>> entries;
    for (const auto& [name, m] : quantized) entries.emplace_back(name, m.view());
    try {
      write_beside_then_rename(path, [&](const std::string& own) { kernels::write_int4_cache(own, tag, entries); });
      return built;
    } catch (const Error& e) {
      built.not_written = e.what();
    }
  }
  built.in_memory = std::make_unique<kernels::Int4Cache>(tag, std::move(quantized));
  return built;
}

}  // namespace

std::string int4_cache_path(const std::string& dir, const std::string& fingerprint) {
  return fmt::format("{}/decoder-int4-{}-v{}-g{}.bin", dir, fingerprint, kFormatVersion, kernels::kInt4GroupSize);
}

std::unique_ptr<kernels::Int4Cache> load_int4_cache(const Checkpoint& ckpt, const std::vector<QuantSource>& sources,
                                                    const std::string& dir, const NoteCallback& on_note) {
  const std::string fingerprint = ckpt.fingerprint();
  const std::string path = dir.empty() ? "" : int4_cache_path(dir, fingerprint);
  const std::string tag = cache_tag(fingerprint);
  return open_or_build_quant_cache<kernels::Int4Cache>(
      "int4", path, [&](const kernels::Int4Cache& cache) { return mismatch(cache, tag, sources); },
      [&](const std::string& p) { return build_cache(p, tag, sources); }, sources.size(), on_note);
}

}  // namespace qvl
