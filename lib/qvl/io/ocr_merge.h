// Joining the outputs of `qvl ocr --shard K/N` runs into what one run over all
// the inputs would have written: the rules, without the file I/O (which is in
// apps/qvl/cmd_ocr_merge.cpp).
//
// - Order: the inputs' order (the same listing a single run makes); a file's
//   records by page (a record without "page" first).
// - Each file's records come from one shard output. Within it, when --resume
//   ran after the file changed, the records with the sha256 of its last record
//   are the current ones and earlier ones are superseded; of two records for
//   the same page, the later wins.
// - Checked: every input has a record, no file is in two shard outputs, no
//   record is for a file outside the inputs, a file's pages are 1..n without
//   gaps, n being the "pages" its records give (records of an older qvl have
//   no "pages": then the highest page they hold).
// - Identical files (same sha256 and page) in different shards were computed
//   separately; a single run computes the first and repeats it with
//   "duplicate_of": the merge sets "duplicate_of" to the first such file in the
//   merged order, and removes it from the first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qvl {

// One record of a shard output, as much of it as the merge looks at.
struct ShardRecord {
  std::string file;
  int64_t page = 0;          // 0: the record has no "page"
  int64_t pages = 0;         // the file's page count; 0: the record has no "pages"
  std::string sha256;        // "": none (an unreadable file)
  bool is_error = false;     // has "error"
  std::string duplicate_of;  // "": none
  size_t source = 0;         // which shard output (index into the caller's list)
  uint64_t offset = 0;       // where its line starts in that output
  uint64_t length = 0;       // the line's length without its newline
};

struct MergePlan {
  struct Entry {
    size_t record = 0;         // index into the records given to plan_merge
    bool rewrite = false;      // "duplicate_of" must change to `duplicate_of`
    std::string duplicate_of;  // what it must say ("": no such field)
  };
  std::vector<Entry> order;  // what to write, in order

  std::vector<std::string> missing;     // inputs without any record
  std::vector<std::string> unexpected;  // files with records that are not among the inputs
  struct Overlap {
    std::string file;
    size_t first_source = 0, second_source = 0;
  };
  std::vector<Overlap> overlapping;     // files with records in two shard outputs
  std::vector<std::string> page_gaps;   // "FILE: page 3 of 4 missing" (pages not 1..n)
  size_t superseded = 0;                // older records left out (see above)
  size_t duplicates_set = 0;            // records whose "duplicate_of" the merge changed

  bool complete() const { return missing.empty() && unexpected.empty() && overlapping.empty() && page_gaps.empty(); }
};

// `inputs`: the paths a single run would process, in its order, each once.
// `records`: every record of every shard output, each output's in file order.
MergePlan plan_merge(const std::vector<std::string>& inputs, const std::vector<ShardRecord>& records);

}  // namespace qvl
