#include "qvl/batch/ocr_queue.h"

#include <utility>

#include "qvl/io/jsonl.h"

namespace qvl {

std::string message_naming(const std::string& path, const std::string& what) {
  return what.find(path) != std::string::npos ? what : path + ": " + what;
}

OcrQueue::OcrQueue(OcrQueueHooks hooks) : hooks_(std::move(hooks)) {}

void OcrQueue::run(const OcrAnswerPages& answer) {
  // Copies of a page that failed in the model are computed in a second round.
  do {
    answer([&] { return next_request(); }, [&](uint64_t tag, OcrAnswer a) { on_answer(tag, std::move(a)); });
  } while (!retries_.empty() && !interrupted());
}

// The next page the model should compute; pages that need no model work get
// their record on the way.
std::optional<OcrRequest> OcrQueue::next_request() {
  while (true) {
    if (interrupted()) {
      if (!told_interrupt_ && hooks_.on_interrupt) hooks_.on_interrupt(in_flight_.size());
      told_interrupt_ = true;
      return std::nullopt;
    }
    if (!retries_.empty()) {
      PageSlot c = retries_.front();
      retries_.pop_front();
      OcrPage p = hooks_.prepare_again(c.path, c.page);
      p.pages = c.pages;
      if (!p.error.empty()) {
        fail(c.slot, p);
        continue;
      }
      return submit(c.slot, p);
    }
    std::optional<OcrPage> next = hooks_.next_page();
    if (!next) return std::nullopt;
    OcrPage& p = *next;
    const size_t slot = taken_++;
    current_ = p.path;
    if (p.page == 1 && p.pages > 1 && hooks_.on_more_pages) hooks_.on_more_pages(size_t(p.pages - 1));
    if (p.already_done) {
      counts_.skipped += 1;
      settle(slot, std::nullopt);
    } else if (!p.error.empty()) {
      fail(slot, p);
    } else if (p.same_as_earlier && results_.count(p.content_key())) {
      reuse({slot, p.path, p.page, p.pages}, p.sha256, results_.at(p.content_key()));
    } else if (p.same_as_earlier && computing_.count(p.content_key())) {
      copies_[p.content_key()].push_back({slot, p.path, p.page, p.pages});
    } else if (p.same_as_earlier) {
      // A copy of a page that failed in the model was not decoded ahead: do it now.
      const int pages = p.pages;
      p = hooks_.prepare_again(p.path, p.page);
      p.pages = pages;
      if (!p.error.empty()) {
        fail(slot, p);
        continue;
      }
      return submit(slot, p);
    } else {
      return submit(slot, p);
    }
  }
}

OcrRequest OcrQueue::submit(size_t slot, OcrPage& p) {
  in_flight_[slot] = {p.path, p.page, p.pages, p.sha256, p.content_key(), p.width, p.height, p.prepare_ms,
                      Clock::now()};
  computing_.insert(p.content_key());
  OcrRequest req;
  req.tag = slot;
  req.path = p.path;
  req.page = p.page;
  req.image = std::move(p.image);
  return req;
}

void OcrQueue::on_answer(uint64_t tag, OcrAnswer a) {
  const size_t slot = size_t(tag);
  InFlight f = std::move(in_flight_.at(slot));
  in_flight_.erase(slot);
  computing_.erase(f.key);
  std::vector<PageSlot> copies = std::move(copies_[f.key]);
  copies_.erase(f.key);
  const double ms = f.prepare_ms + std::chrono::duration<double, std::milli>(Clock::now() - f.submitted).count();
  if (!a.error.empty()) {
    OcrPage p;
    p.path = f.path;
    p.page = f.page;
    p.pages = f.pages;
    p.sha256 = f.sha256;
    p.error = message_naming(f.path, a.error);
    fail(slot, p);
    for (PageSlot& c : copies) retries_.push_back(std::move(c));
    return;
  }
  counts_.computed += 1;
  Result result{f.path, f.width, f.height, a.text, a.tokens, a.stop_reason};
  counts_.done += 1;
  settle(slot, result_record({slot, f.path, f.page, f.pages}, f.sha256, result, ms));
  if (hooks_.on_computed) hooks_.on_computed(f.path, f.page, a, ms);
  for (const PageSlot& c : copies) reuse(c, f.sha256, result);
  results_.emplace(f.key, std::move(result));
}

void OcrQueue::reuse(const PageSlot& page, const std::string& sha256, const Result& result) {
  counts_.done += 1;
  counts_.reused += 1;
  settle(page.slot, result_record(page, sha256, result, 0));
}

void OcrQueue::fail(size_t slot, const OcrPage& p) {
  counts_.failed += 1;
  settle(slot, error_record(p));
}

// Marks a slot's record ready (none: skipped) and writes every ready record in input order.
void OcrQueue::settle(size_t slot, std::optional<OcrRecord> record) {
  ready_[slot] = std::move(record);
  for (auto it = ready_.find(written_); it != ready_.end(); it = ready_.find(written_)) {
    if (it->second) hooks_.write(*it->second);
    ready_.erase(it);
    written_ += 1;
  }
  if (hooks_.on_progress) hooks_.on_progress(written_, written_ - counts_.skipped, current_);
}

// "file" (with "file_b64" for a name that is not UTF-8), and for a page of a
// multi-page file "page" and "pages": how many there are, so that a merge
// can tell a file whose last pages are missing.
void OcrQueue::put_file_and_pages(OcrRecord& r, const std::string& file, int page, int pages) {
  put_path(r, "file", file);
  if (page > 0) {
    r["page"] = page;
    r["pages"] = pages;
  }
}

OcrRecord OcrQueue::error_record(const OcrPage& p) {
  OcrRecord r;
  put_file_and_pages(r, p.path, p.page, p.pages);
  if (!p.sha256.empty()) r["sha256"] = p.sha256;
  r["error"] = p.error;
  return r;
}

OcrRecord OcrQueue::result_record(const PageSlot& page, const std::string& sha256, const Result& res, double ms) {
  OcrRecord r;
  put_file_and_pages(r, page.path, page.page, page.pages);
  r["sha256"] = sha256;
  r["width"] = res.width;
  r["height"] = res.height;
  r["text"] = res.text;
  r["tokens"] = res.tokens;
  r["ms"] = int64_t(ms + 0.5);
  r["stop_reason"] = res.stop_reason;
  if (res.file != page.path) put_path(r, "duplicate_of", res.file);
  return r;
}

}  // namespace qvl
