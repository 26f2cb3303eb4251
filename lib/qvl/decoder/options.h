// How the text decoder runs: compute dtype, when weights are loaded, how long
// the context may grow, and whether the projection weights are quantized.
#pragma once
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <string>

#include "qvl/model/precision.h"  // WeightQuant, kDefaultInt8GroupSize

namespace qvl {

// Receives one-line notes about slow one-time work (building the int8 cache),
// for a front end to show; the library itself never prints.
using NoteCallback = std::function<void(const std::string& note)>;

struct DecoderOptions {
  at::ScalarType dtype = at::kBFloat16;  // compute dtype: kBFloat16 or kFloat
  bool lazy = true;                      // false: load (and pre-fault) every weight in the constructor
  int64_t max_context = 4096;            // tokens the KV cache holds
  WeightQuant quant = WeightQuant::None;
  // Int8 only: the folder of the quantized-weights cache ("": quantized in
  // memory, not cached), and the
  // number of weights along a row that share one scale (a multiple of 64).
  std::string quant_cache_dir;
  int64_t int8_group_size = kDefaultInt8GroupSize;
  NoteCallback on_note;
  // Lazy only: map the weights' pages in on a background thread, in the order
  // a forward pass reads them, while the caller does other work (io/page_prefetch.h).
  bool prefetch = true;
  // Eager only: threads that map the weights' pages before the constructor
  // returns; 0: as many as the compute threads (kernels::max_threads()).
  int populate_threads = 0;
};

}  // namespace qvl
