// qvl ocr's reader side: input files made into pages ready for the model
// (read, hashed, decoded, preprocessed), with pages an earlier run already
// wrote (--resume) and pages identical to one seen before marked instead of
// decoded; and the thread that does it ahead of the model.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "qvl/batch/ocr_queue.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/file_scan.h"

namespace qvl {

// What a record stands for: (file, sha256 or "", page or 0). Pages of a
// multi-page file (PDF, TIFF) have their own records; other files have page 0
// (no "page" field).
using OcrRecordKey = std::tuple<std::string, std::string, int>;

struct OcrPreparer {
  PreprocessorConfig preprocessor;
  ImageLimits limits;
  DecodeRequest request;  // dpi and target size; the page is set per page
  const std::set<OcrRecordKey>* done = nullptr;  // records already written (--resume); may stay null
  std::set<std::string> decoded;  // content_key() of every page decoded successfully so far

  // A file becomes one page per page (one for a single-page file or one that
  // cannot be read), handed to `emit` in page order; stops early when emit
  // returns false.
  void prepare(const ScannedFile& in, const std::function<bool(OcrPage)>& emit);
  // One page again, decoded even if its content was seen (a copy of a page
  // that failed in the model, or that was not decoded ahead): `page` as in OcrPage.
  OcrPage prepare_page(const std::string& path, int page);
  // The whole file, hashed. An oversized file is hashed from disk and refused
  // without being held in memory.
  std::string read_bytes(const std::string& path, std::string* sha256) const;

 private:
  bool is_done(const OcrRecordKey& key) const { return done && done->count(key) > 0; }
  void decode_page(const std::string& bytes, OcrPage& p, bool decode_even_if_seen);
};

// Runs an OcrPreparer over all files on its own thread, `depth` pages ahead of
// next(); stops and joins when destroyed. The thread owns what it uses, so
// that when it is stuck in a read that does not return, the destructor can
// leave it behind after a grace period instead of hanging an interrupted run.
class OcrPrefetcher {
 public:
  // `interrupted`: polled while waiting, from the caller's thread only.
  OcrPrefetcher(const std::vector<ScannedFile>& files, const OcrPreparer& preparer, size_t depth,
                std::function<bool()> interrupted);
  ~OcrPrefetcher();
  OcrPrefetcher(const OcrPrefetcher&) = delete;
  OcrPrefetcher& operator=(const OcrPrefetcher&) = delete;
  // The next page in input order; nothing once all are given, or once
  // interrupted (a read that never ends must not keep the run alive).
  std::optional<OcrPage> next();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::function<bool()> interrupted_;
};

}  // namespace qvl
