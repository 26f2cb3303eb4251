// What the int8 and int4 weight caches (decoder/int8_weights, int4_weights)
// share: open the cache file when it is readable and fits, else quantize the
// checkpoint into it (atomically) and open that, or keep the weights in memory
// when it cannot be written, telling on_note what is happening and how long
// it took.
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

// model_cache_dir(model_dir, fingerprint, chosen) for the quantized weights'
// caches, or "" when no folder can be used: the weights are then quantized in
// memory, and on_note hears why (once per process: the decoder and the vision
// tower ask for the same folder).
std::string quant_cache_dir(const std::string& model_dir, const std::string& fingerprint, const std::string& chosen,
                            const NoteCallback& on_note);

// What build() made: the file at the path it was given, or, when that path is
// "" or the file could not be written (the reason in not_written), the
// matrices held in memory.
template <class Cache>
struct QuantBuild {
  size_t bytes = 0;  // of quantized weights
  std::unique_ptr<Cache> in_memory;
  std::string not_written;
};

// `kind`: "int8" or "int4", and `part`: "decoder" or "vision", for the notes. mismatch(cache): why an opened
// cache does not fit ("" when it does). build(path): quantizes, writing the
// file atomically unless path is "" (quant_cache_dir() found no folder). A
// file that cannot be written (a full disk, a folder that is not one) costs a
// note, not the run. matrices: how many, for the note.
template <class Cache>
std::unique_ptr<Cache> open_or_build_quant_cache(const std::string& kind, const std::string& path,
                                                 const std::function<std::string(const Cache&)>& mismatch,
                                                 const std::function<QuantBuild<Cache>(const std::string&)>& build,
                                                 size_t matrices, const NoteCallback& on_note,
                                                 const std::string& part = "decoder") {
  std::string problem;
  if (!path.empty() && quant_cache_exists(path)) problem = untrusted_cache_reason(path);
  if (!path.empty() && quant_cache_exists(path) && problem.empty()) {
    try {
      auto cache = std::make_unique<Cache>(path);
      problem = mismatch(*cache);
      if (problem.empty()) return cache;
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  if (on_note) {
    on_note(path.empty()       ? fmt::format("quantizing the {} weights to {} (in memory, for this run)", part, kind)
            : problem.empty() ? fmt::format("quantizing the {} weights to {} (once; cached in {})", part, kind, path)
                              : fmt::format("rebuilding the {} weight cache {}: {}", kind, path, problem));
  }
  const auto t0 = std::chrono::steady_clock::now();
  QuantBuild<Cache> built = build(path);
  std::unique_ptr<Cache> cache = std::move(built.in_memory);
  if (!cache) {
    cache = std::make_unique<Cache>(path);
    problem = mismatch(*cache);
    if (!problem.empty())
      throw Error(fmt::format("{}: the {} cache just written is unusable: {}", path, kind, problem));
  } else if (!path.empty() && on_note) {
    on_note(fmt::format("{} {} weight cache not saved: {}; the weights are quantized in memory for this run", part,
                        kind, built.not_written));
  }
  if (on_note) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    on_note(fmt::format("{} {} weights ready: {} matrices, {:.0f} MB, in {:.1f} s", part, kind, matrices,
                        double(built.bytes) / 1e6, seconds));
  }
  return cache;
}

}  // namespace qvl
