// qvl ocr's bookkeeping between the prepared pages and the model, without the
// model: one record per page, written in input order while pages are answered
// out of order (--batch), pages with the same content answered once (copies
// still in flight wait for the result; copies of a page that failed in the
// model are computed again in a second round), pages already done (--resume)
// or unreadable settled without the model, and an interrupt that stops
// feeding new pages but finishes those started.
//
// The model comes in as a function of Session::ask_batch's shape, so the
// queue is tested with a fake one (tests/unit/test_ocr_queue.cpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qvl/image/preprocess.h"

namespace qvl {

using OcrRecord = nlohmann::ordered_json;  // fields in the documented order

// One page of an input file made ready for the model, or found not to need it.
struct OcrPage {
  std::string path;
  int page = 0;                  // 1-based page of a multi-page file; 0: the file has one page
  int pages = 1;                 // pages in the file (1 when it could not be read)
  std::string sha256;            // "" when the file could not be read
  std::string error;             // set: the record is an error
  bool already_done = false;     // in the output of an earlier run (--resume)
  bool same_as_earlier = false;  // identical content decoded earlier in this run: reuse that result
  int64_t width = 0, height = 0;
  PatchifiedImage image;
  double prepare_ms = 0;
  // Identical content: the same bytes and the same page.
  std::string content_key() const { return page > 0 ? sha256 + "#" + std::to_string(page) : sha256; }
};

// A page for the model; `tag` comes back with its answer.
struct OcrRequest {
  uint64_t tag = 0;
  std::string path;
  int page = 0;
  PatchifiedImage image;
};

// What the model said about one request.
struct OcrAnswer {
  std::string text;
  std::vector<int32_t> tokens;
  std::string stop_reason;
  std::string error;  // set: the request failed (the others go on)
  // For --verbose only.
  int64_t image_tokens = 0;
  double vision_s = 0, prefill_s = 0, decode_s = 0;
};

// Answers requests, some at a time and in any order: takes them from `next`
// until it gives nothing, and hands each answer to `done` with the request's tag
// (Session::ask_batch's shape).
using OcrNextRequest = std::function<std::optional<OcrRequest>()>;
using OcrDone = std::function<void(uint64_t tag, OcrAnswer)>;
using OcrAnswerPages = std::function<void(const OcrNextRequest& next, const OcrDone& done)>;

struct OcrCounts {
  size_t done = 0, failed = 0, skipped = 0, computed = 0, reused = 0;
};

struct OcrQueueHooks {
  // The pages in input order (a file's pages one after another); nothing when all are given.
  std::function<std::optional<OcrPage>()> next_page;
  // The page again, decoded even if its content was seen (`page` as in OcrPage):
  // for a copy of a page that failed in the model, or that was not decoded ahead.
  std::function<OcrPage(const std::string& path, int page)> prepare_again;
  // Each record, in input order (a skipped page has none).
  std::function<void(const OcrRecord&)> write;
  // Polled before each page is taken: true stops feeding new pages.
  std::function<bool()> interrupted;
  // Optional: a multi-page file adds `more` pages to the total.
  std::function<void(size_t more)> on_more_pages;
  // Optional: after each settled page; `written` records are behind us, `worked`
  // of them not skipped; `current` is the file last taken.
  std::function<void(size_t written, size_t worked, const std::string& current)> on_progress;
  // Optional: once, when an interrupt is first seen, with the pages still in the model.
  std::function<void(size_t in_flight)> on_interrupt;
  // Optional: a page the model answered, with the ms it took (preparing included).
  std::function<void(const std::string& path, int page, const OcrAnswer&, double ms)> on_computed;
};

class OcrQueue {
 public:
  explicit OcrQueue(OcrQueueHooks hooks);
  // Feeds every page through `answer` (twice when copies of a failed page wait).
  void run(const OcrAnswerPages& answer);
  const OcrCounts& counts() const { return counts_; }
  size_t finished() const { return written_; }  // pages settled and written (or skipped), in order

 private:
  using Clock = std::chrono::steady_clock;
  struct InFlight {
    std::string path;
    int page = 0, pages = 1;
    std::string sha256, key;  // key: OcrPage::content_key()
    int64_t width = 0, height = 0;
    double prepare_ms = 0;
    Clock::time_point submitted;
  };
  struct PageSlot {  // a page's place in the output and what its record names
    size_t slot;
    std::string path;
    int page = 0, pages = 1;
  };
  // What a computed page gave, kept for later pages with the same content.
  struct Result {
    std::string file;
    int64_t width = 0, height = 0;
    std::string text;
    std::vector<int32_t> tokens;
    std::string stop_reason;
  };

  std::optional<OcrRequest> next_request();
  OcrRequest submit(size_t slot, OcrPage& p);
  void on_answer(uint64_t tag, OcrAnswer a);
  void reuse(const PageSlot& page, const std::string& sha256, const Result& result);
  void fail(size_t slot, const OcrPage& p);
  void settle(size_t slot, std::optional<OcrRecord> record);
  bool interrupted() const { return hooks_.interrupted && hooks_.interrupted(); }
  static OcrRecord error_record(const OcrPage& p);
  static OcrRecord result_record(const PageSlot& page, const std::string& sha256, const Result& res, double ms);
  static void put_file_and_pages(OcrRecord& r, const std::string& file, int page, int pages);

  OcrQueueHooks hooks_;
  OcrCounts counts_;
  size_t taken_ = 0;                                 // pages taken from next_page; slot = input index
  size_t written_ = 0;                               // slots before this are written
  std::map<size_t, std::optional<OcrRecord>> ready_;  // settled, waiting for earlier slots
  std::map<size_t, InFlight> in_flight_;             // by slot
  std::set<std::string> computing_;                  // content keys of pages in flight
  std::map<std::string, std::vector<PageSlot>> copies_;  // waiting for a page in flight, by its content key
  std::deque<PageSlot> retries_;                         // copies of a page that failed in the model
  std::map<std::string, Result> results_;            // by content key
  std::string current_;
  bool told_interrupt_ = false;
};

// An error message that names the file, whichever layer produced it.
std::string message_naming(const std::string& path, const std::string& what);

}  // namespace qvl
