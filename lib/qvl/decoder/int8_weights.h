// The decoder's projection matrices as int8 weights, quantized once per
// checkpoint and group size into a cache file that later runs mmap: building
// reads every weight once (seconds); opening reads only the file's header, so
// a layer's int8 pages are touched when it first runs.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qvl/decoder/options.h"
#include "qvl/decoder/quant_cache.h"  // QuantSource
#include "qvl/io/safetensors.h"
#include "qvl/kernels/int8_cache.h"

namespace qvl {

using Int8Source = QuantSource;

// <dir>/<part>-int8-<fingerprint>-v<format>-g<group>.bin: other weights,
// group sizes or format versions never share a file, and the decoder's and
// the vision tower's caches ("decoder", "vision") never evict each other.
std::string int8_cache_path(const std::string& dir, const std::string& fingerprint, int64_t group_size,
                            const std::string& part = "decoder");

// The mapped cache holding exactly `sources` quantized with group_size. It is
// (re)built first, written atomically, when missing, unreadable (truncated,
// corrupt header) or stale (another tag, other matrices or shapes); on_note
// then hears what is happening and how long it took; with dir "", or a
// file that cannot be written, the matrices are held in memory. part: whose matrices
// these are ("decoder" or "vision"; names the file and its tag, and the
// notes); file_part, when not empty, names the file instead (a new set of
// matrices for a part gets a file of its own, so binaries from before and
// after the change that share a cache folder do not rebuild each other's).
std::unique_ptr<kernels::Int8Cache> load_int8_cache(const Checkpoint& ckpt, const std::vector<Int8Source>& sources,
                                                    const std::string& dir, int64_t group_size,
                                                    const NoteCallback& on_note, const std::string& part = "decoder",
                                                    const std::string& file_part = "");

}  // namespace qvl
