// What the int8 and int4 weight caches (decoder/int8_weights, int4_weights)
// share: open the cache file when it is readable and fits, else quantize the
// checkpoint into it (atomically) and open that, telling on_note what is
// happening and how long it took.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "qvl/decoder/options.h"  // NoteCallback
#include "qvl/error.h"
#include "qvl/io/safetensors.h"

namespace qvl {

// A matrix to quantize: its name in the cache and its checkpoint tensor [rows, cols].
struct QuantSource {
  std::string name;
  const TensorView* view = nullptr;
};

// Drops the tensor's pages from this process's resident set (they stay in the
// page cache): quantizing reads all weights, and RSS should not keep them.
void release_pages(const TensorView& v);

// Runs write(own) with a file name of this process's own beside `path`, then
// renames it to `path`: two processes building at once never write one file.
void write_beside_then_rename(const std::string& path, const std::function<void(const std::string& own)>& write);

// Whether `path` is a regular file (an unreadable cache is rebuilt, not an error).
bool quant_cache_exists(const std::string& path);

// Why the cache file at `path` is not to be trusted, or "" when it is: it or
// its folder can be written by other users (group or other write permission,
// or owned by a user other than this process's and root), so it may have been
// swapped. QVL_TRUST_CACHE=1 trusts them anyway (a folder shared on purpose).
std::string untrusted_cache_reason(const std::string& path);

// `kind`: "int8" or "int4", and `part`: "decoder" or "vision", for the notes. mismatch(cache): why an opened
// cache does not fit ("" when it does). build(path): quantizes and writes the
// file atomically, returning the bytes of quantized weights. matrices: how
// many, for the note.
template <class Cache>
std::unique_ptr<Cache> open_or_build_quant_cache(const std::string& kind, const std::string& path,
                                                 const std::function<std::string(const Cache&)>& mismatch,
                                                 const std::function<size_t(const std::string&)>& build,
                                                 size_t matrices, const NoteCallback& on_note,
                                                 const std::string& part = "decoder") {
  std::string problem;
  if (quant_cache_exists(path)) problem = untrusted_cache_reason(path);
  if (quant_cache_exists(path) && problem.empty()) {
    try {
      auto cache = std::make_unique<Cache>(path);
      problem = mismatch(*cache);
      if (problem.empty()) return cache;
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  if (on_note) {
    on_note(problem.empty() ? fmt::format("quantizing the {} weights to {} (once; cached in {})", part, kind, path)
                            : fmt::format("rebuilding the {} weight cache {}: {}", kind, path, problem));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bytes = build(path);
  auto cache = std::make_unique<Cache>(path);
  problem = mismatch(*cache);
  if (!problem.empty())
    throw Error(fmt::format("{}: the {} cache just written is unusable: {}", path, kind, problem));
  if (on_note) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    on_note(fmt::format("{} {} weights ready: {} matrices, {:.0f} MB, in {:.1f} s", part, kind, matrices, double(bytes) / 1e6,
                        seconds));
  }
  return cache;
}

}  // namespace qvl
