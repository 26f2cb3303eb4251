// `qvl ocr --merge SHARD.jsonl...`: the outputs of `qvl ocr --shard K/N` runs
// joined into the file one run over the same inputs would have written
// (rules: lib/qvl/io/ocr_merge.h). It takes the same input arguments as the
// shard runs, so that it knows which files there should be and in what order.
#pragma once
#include <string>
#include <vector>

#include "qvl/io/file_scan.h"

namespace qvl::app {

struct OcrMergeOptions {
  std::vector<std::string> shard_outputs;
  std::string output;  // "": stdout
  bool force = false;  // replace a non-empty output
  bool quiet = false;
};

// `inputs`: the expanded input arguments, as a single run lists them (not yet
// de-duplicated). Returns the exit status; throws qvl::Error when the shard
// outputs are incomplete or inconsistent, having written nothing.
int run_ocr_merge(const OcrMergeOptions& options, const std::vector<ScannedFile>& inputs);

}  // namespace qvl::app
