// The decoder's projection matrices as 4-bit weights (kernels/quant4.h),
// quantized once per checkpoint into a cache file that later runs mmap, as
// the int8 ones are (decoder/int8_weights.h; both go through quant_cache.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "qvl/decoder/options.h"
#include "qvl/decoder/quant_cache.h"  // QuantSource
#include "qvl/io/safetensors.h"
#include "qvl/kernels/int4_cache.h"

namespace qvl {

// <dir>/decoder-int4-<fingerprint>-v<format>-g64.bin: other weights or format
// versions never share a file.
std::string int4_cache_path(const std::string& dir, const std::string& fingerprint);

// The mapped cache holding exactly `sources` in 4 bits. It is (re)built
// first, written atomically, when missing, unreadable (truncated, corrupt
// header) or stale (another tag, other matrices or shapes); on_note then
// hears what is happening and how long it took. With dir "", or a file
// that cannot be written, the matrices are held in memory instead.
std::unique_ptr<kernels::Int4Cache> load_int4_cache(const Checkpoint& ckpt, const std::vector<QuantSource>& sources,
                                                    const std::string& dir, const NoteCallback& on_note);

}  // namespace qvl
