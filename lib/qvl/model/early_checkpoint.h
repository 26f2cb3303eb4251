// Opening the checkpoint, and mapping the text decoder's weights into the page
// tables, while the process is still starting.
//
// A qvl process spends its first ~0.35 s before main() on one core: the
// dynamic loader and libtorch's static registration. Mapping the bf16
// decoder's 3.4 GB of page-cache pages costs ~0.25 s of CPU (4 KB pages;
// docs/PERFORMANCE.md, "Start-up"), which eager loading paid before ready and
// a lazy run's first forward pass paid inside its time to first token (the
// warm prompt-cache question). The front end's .preinit_array hook calls
// open_checkpoint_early() before any library starts; it opens the checkpoint
// on a thread of its own and populates on the idle core, and the session
// takes the opened checkpoint instead of opening it again.
//
// This code runs before the executable's static initializers: what it calls
// (io/safetensors, model/config, model/checkpoint_layout, io/page_prefetch)
// must not depend on namespace-scope objects with constructors.
#pragma once
#include <optional>
#include <string>

#include "qvl/io/page_prefetch.h"  // ByteRange
#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"

namespace qvl {

struct EarlyCheckpointRequest {
  std::string model_dir;
  // Map the text decoder's weights as stored (a run whose decoder reads the
  // checkpoint: no --quant); otherwise only open the checkpoint.
  bool populate_text_weights = false;
};

// Starts the thread (once per process; later calls do nothing). Never throws:
// any failure leaves the opening to take_early_checkpoint's caller, who then
// reports it as usual.
void open_checkpoint_early(const EarlyCheckpointRequest& request) noexcept;

// The checkpoint opened early for `model_dir` (the same folder: same device
// and inode), waiting for the opening to finish; nullopt if none was started,
// it failed, it is for another folder, or it was taken already. Its pages may
// still be being populated: the checkpoint stops that when destroyed.
std::optional<Checkpoint> take_early_checkpoint(const std::string& model_dir);

// The byte ranges of the text decoder's weights as the checkpoint stores
// them, in the order a forward pass reads them (layer by layer, then the
// final norm and the output projection: the embedding table when tied).
std::vector<ByteRange> text_weight_ranges(const Checkpoint& ckpt, const TextConfig& cfg);

}  // namespace qvl
