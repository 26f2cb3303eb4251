// qvl ocr's queue (qvl/batch/ocr_queue.h) with a fake model: records in input
// order whatever order the answers come in, identical pages answered once,
// failures that stay with their page, interrupts, and pages already done.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qvl/batch/ocr_queue.h"

using namespace qvl;

namespace {

OcrPage page_of(const std::string& path, const std::string& sha, int page = 0, int pages = 1) {
  OcrPage p;
  p.path = path;
  p.sha256 = sha;
  p.page = page;
  p.pages = pages;
  p.width = 10;
  p.height = 20;
  return p;
}

std::string name_of(const std::string& path, int page) {
  return page > 0 ? path + "#" + std::to_string(page) : path;
}

// A model that takes up to `batch` requests, then answers them last first:
// every round but a round of one answers out of order. `asked` gets the
// pages in the order they were answered.
OcrAnswerPages fake_model(size_t batch, std::vector<std::string>& asked,
                          std::function<std::string(const OcrRequest&)> error_for = nullptr) {
  return [batch, &asked, error_for](const OcrNextRequest& next, const OcrDone& done) {
    for (bool more = true; more;) {
      std::vector<OcrRequest> running;
      while (running.size() < batch) {
        std::optional<OcrRequest> r = next();
        if (!r) {
          more = false;
          break;
        }
        running.push_back(std::move(*r));
      }
      for (auto it = running.rbegin(); it != running.rend(); ++it) {
        asked.push_back(name_of(it->path, it->page));
        OcrAnswer a;
        if (error_for) a.error = error_for(*it);
        if (a.error.empty()) {
          a.text = "text of " + name_of(it->path, it->page);
          a.tokens = {1, 2, 3};
          a.stop_reason = "eos";
        }
        done(it->tag, std::move(a));
      }
    }
  };
}

struct Run {
  std::vector<OcrPage> pages;
  std::vector<OcrRecord> records;
  std::vector<std::string> prepared_again;
  size_t taken = 0;
  size_t more_pages = 0;
  std::vector<size_t> interrupts;
  size_t last_written = 0, last_worked = 0;
  std::function<bool()> interrupted = [] { return false; };

  OcrCounts go(const OcrAnswerPages& model) {
    OcrQueueHooks h;
    h.next_page = [this]() -> std::optional<OcrPage> {
      if (taken == pages.size()) return std::nullopt;
      return pages[taken++];
    };
    h.prepare_again = [this](const std::string& path, int page) {
      prepared_again.push_back(name_of(path, page));
      for (const OcrPage& p : pages)
        if (p.path == path && p.page == page) {
          OcrPage again = p;
          again.same_as_earlier = false;
          again.pages = 1;  // as OcrPreparer::prepare_page: it does not count the file's pages
          return again;
        }
      FAIL("prepare_again of a page never given: " << path);
      return OcrPage{};
    };
    h.write = [this](const OcrRecord& r) { records.push_back(r); };
    h.interrupted = [this] { return interrupted(); };
    h.on_more_pages = [this](size_t more) { more_pages += more; };
    h.on_progress = [this](size_t written, size_t worked, const std::string&) {
      last_written = written;
      last_worked = worked;
    };
    h.on_interrupt = [this](size_t in_flight) { interrupts.push_back(in_flight); };
    OcrQueue queue(std::move(h));
    queue.run(model);
    CHECK(queue.finished() == last_written);
    return queue.counts();
  }

  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const OcrRecord& r : records)
      out.push_back(name_of(r["file"].get<std::string>(), r.contains("page") ? r["page"].get<int>() : 0));
    return out;
  }
};

}  // namespace

TEST_CASE("ocr queue: records come in input order while the model answers out of order") {
  Run run;
  for (const char* name : {"a.png", "b.png", "c.png", "d.png", "e.png"}) run.pages.push_back(page_of(name, name));
  std::vector<std::string> asked;
  const OcrCounts n = run.go(fake_model(3, asked));
  CHECK(asked == std::vector<std::string>{"c.png", "b.png", "a.png", "e.png", "d.png"});  // out of order
  CHECK(run.files() == std::vector<std::string>{"a.png", "b.png", "c.png", "d.png", "e.png"});
  for (const OcrRecord& r : run.records) {
    CHECK(r["text"] == "text of " + r["file"].get<std::string>());
    CHECK(r["sha256"] == r["file"]);
    CHECK(r["width"] == 10);
    CHECK(r["height"] == 20);
    CHECK(r["stop_reason"] == "eos");
    CHECK_FALSE(r.contains("duplicate_of"));
    CHECK_FALSE(r.contains("page"));
  }
  // The documented field order.
  std::vector<std::string> keys;
  for (auto it = run.records[0].begin(); it != run.records[0].end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"file", "sha256", "width", "height", "text", "tokens", "ms", "stop_reason"});
  CHECK(n.done == 5);
  CHECK(n.computed == 5);
  CHECK(n.failed == 0);
  CHECK(run.last_written == 5);
}

TEST_CASE("ocr queue: a multi-page file's pages get their own records in page order") {
  Run run;
  for (int page = 1; page <= 4; ++page) run.pages.push_back(page_of("doc.pdf", "D", page, 4));
  run.pages.push_back(page_of("z.png", "Z"));
  std::vector<std::string> asked;
  run.go(fake_model(4, asked));
  CHECK(asked.front() == "doc.pdf#4");
  CHECK(run.files() == std::vector<std::string>{"doc.pdf#1", "doc.pdf#2", "doc.pdf#3", "doc.pdf#4", "z.png"});
  CHECK(run.records[2]["text"] == "text of doc.pdf#3");
  CHECK(run.more_pages == 3);
  // Each page says how many the file has; a file of one page has neither field.
  std::vector<std::string> keys;
  for (auto it = run.records[0].begin(); it != run.records[0].end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"file", "page", "pages", "sha256", "width", "height", "text", "tokens", "ms",
                                         "stop_reason"});
  for (size_t i = 0; i < 4; ++i) CHECK(run.records[i]["pages"] == 4);
  CHECK_FALSE(run.records[4].contains("pages"));
}

TEST_CASE("ocr queue: error records, reused records and retries of a page keep its page count") {
  // b.tif's page 2 fails in the model; c.tif is a copy of b.tif, so its page 2 is tried again.
  Run run;
  run.pages = {page_of("a.tif", "A", 1, 2), page_of("a.tif", "A", 2, 2), page_of("b.tif", "B", 1, 2),
               page_of("b.tif", "B", 2, 2), page_of("c.tif", "B", 1, 2), page_of("c.tif", "B", 2, 2)};
  run.pages[1].error = "a.tif: page 2 is too large";
  run.pages[4].same_as_earlier = run.pages[5].same_as_earlier = true;
  std::vector<std::string> asked;
  run.go(fake_model(4, asked, [](const OcrRequest& r) { return r.path == "b.tif" && r.page == 2 ? "no memory" : ""; }));
  CHECK(run.files() == std::vector<std::string>{"a.tif#1", "a.tif#2", "b.tif#1", "b.tif#2", "c.tif#1", "c.tif#2"});
  CHECK(run.prepared_again == std::vector<std::string>{"c.tif#2"});
  CHECK(run.records[1]["error"] == "a.tif: page 2 is too large");
  CHECK(run.records[3]["error"] == "b.tif: no memory");
  CHECK(run.records[4]["duplicate_of"] == "b.tif");
  CHECK(run.records[5]["text"] == "text of c.tif#2");
  for (const OcrRecord& r : run.records) CHECK(r["pages"] == 2);
}

TEST_CASE("ocr queue: a file name that is not UTF-8 is kept exactly in file_b64") {
  Run run;
  run.pages = {page_of("a\xe9" "b.png", "S1"), page_of("a\xff" "b.png", "S1")};
  run.pages[1].same_as_earlier = true;
  std::vector<std::string> asked;
  run.go(fake_model(1, asked));
  REQUIRE(run.records.size() == 2);
  for (const OcrRecord& r : run.records) {
    CHECK(r["file"] == "a\xef\xbf\xbd" "b.png");  // U+FFFD where the byte was, for reading
    std::vector<std::string> keys;
    for (auto it = r.begin(); it != r.end(); ++it) keys.push_back(it.key());
    CHECK(keys[1] == "file_b64");
  }
  CHECK(run.records[0]["file_b64"] == "YeliLnBuZw==");
  CHECK(run.records[1]["file_b64"] == "Yf9iLnBuZw==");
  CHECK(run.records[1]["duplicate_of"] == "a\xef\xbf\xbd" "b.png");
  CHECK(run.records[1]["duplicate_of_b64"] == "YeliLnBuZw==");
  // The names need no replacement by the writer (the fake model's text quotes the raw path).
  OcrRecord names = run.records[1];
  names.erase("text");
  CHECK_NOTHROW(names.dump());
}

TEST_CASE("ocr queue: identical pages are answered once and name the first as duplicate_of") {
  // b is a copy of a while a is still in the model; d comes after a's answer.
  for (size_t batch : {size_t(1), size_t(4)}) {
    CAPTURE(batch);
    Run run;
    run.pages = {page_of("a.png", "X"), page_of("b.png", "X"), page_of("c.png", "C"), page_of("d.png", "X")};
    run.pages[1].same_as_earlier = true;
    run.pages[3].same_as_earlier = true;
    std::vector<std::string> asked;
    const OcrCounts n = run.go(fake_model(batch, asked));
    CHECK(asked.size() == 2);  // a and c
    CHECK(run.files() == std::vector<std::string>{"a.png", "b.png", "c.png", "d.png"});
    CHECK_FALSE(run.records[0].contains("duplicate_of"));
    for (size_t i : {size_t(1), size_t(3)}) {
      CHECK(run.records[i]["duplicate_of"] == "a.png");
      CHECK(run.records[i]["text"] == "text of a.png");
      CHECK(run.records[i]["sha256"] == "X");
      CHECK(run.records[i]["ms"] == 0);
    }
    CHECK(n.computed == 2);
    CHECK(n.reused == 2);
    CHECK(n.done == 4);
    CHECK(run.prepared_again.empty());
  }
}

TEST_CASE("ocr queue: a failure stays with its page, and copies of a page the model failed on are computed again") {
  Run run;
  run.pages = {page_of("a.png", "X"), page_of("b.png", "X"), page_of("broken.png", ""), page_of("c.png", "C")};
  run.pages[1].same_as_earlier = true;
  run.pages[2].error = "broken.png: not an image";
  std::vector<std::string> asked;
  const OcrCounts n = run.go(
      fake_model(4, asked, [](const OcrRequest& r) { return r.path == "a.png" ? "out of memory" : ""; }));
  CHECK(run.files() == std::vector<std::string>{"a.png", "b.png", "broken.png", "c.png"});
  CHECK(run.records[0]["error"] == "a.png: out of memory");
  CHECK(run.records[0]["sha256"] == "X");
  CHECK_FALSE(run.records[0].contains("text"));
  // b has a's bytes but its own try, in a second round.
  CHECK(run.prepared_again == std::vector<std::string>{"b.png"});
  CHECK(run.records[1]["text"] == "text of b.png");
  CHECK_FALSE(run.records[1].contains("duplicate_of"));
  CHECK(run.records[2]["error"] == "broken.png: not an image");
  CHECK_FALSE(run.records[2].contains("sha256"));
  CHECK(run.records[3]["text"] == "text of c.png");
  CHECK(std::count(asked.begin(), asked.end(), "broken.png") == 0);
  CHECK(n.failed == 2);
  CHECK(n.computed == 2);
  CHECK(n.done == 2);
}

TEST_CASE("ocr queue: an interrupt stops taking pages and finishes those started") {
  Run run;
  for (const char* name : {"a.png", "b.png", "c.png", "d.png", "e.png"}) run.pages.push_back(page_of(name, name));
  run.interrupted = [&run] { return run.taken >= 2; };
  std::vector<std::string> asked;
  const OcrCounts n = run.go(fake_model(3, asked));
  CHECK(run.taken == 2);
  CHECK(run.files() == std::vector<std::string>{"a.png", "b.png"});
  CHECK(run.records[1]["text"] == "text of b.png");
  CHECK(run.interrupts == std::vector<size_t>{2});  // told once, with a and b in the model
  CHECK(n.done == 2);
}

TEST_CASE("ocr queue: pages already done (--resume) get no record and never reach the model") {
  Run run;
  run.pages = {page_of("a.png", "A"), page_of("doc.tif", "T", 1, 3), page_of("doc.tif", "T", 2, 3),
               page_of("doc.tif", "T", 3, 3), page_of("e.png", "E")};
  run.pages[0].already_done = true;
  run.pages[2].already_done = true;
  std::vector<std::string> asked;
  const OcrCounts n = run.go(fake_model(2, asked));
  CHECK(run.files() == std::vector<std::string>{"doc.tif#1", "doc.tif#3", "e.png"});
  CHECK(asked.size() == 3);
  CHECK(n.skipped == 2);
  CHECK(n.done == 3);
  CHECK(run.last_written == 5);
  CHECK(run.last_worked == 3);
}
