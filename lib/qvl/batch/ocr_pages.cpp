#include "qvl/batch/ocr_pages.h"

#include <fmt/core.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>
#include <utility>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/sha256.h"

namespace qvl {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
const uint8_t* bytes_of(const std::string& bytes) { return reinterpret_cast<const uint8_t*>(bytes.data()); }

}  // namespace

void OcrPreparer::prepare(const ScannedFile& in, const std::function<bool(OcrPage)>& emit) {
  const auto t0 = Clock::now();
  OcrPage p;
  p.path = in.path;
  if (!in.error.empty()) {
    p.error = in.error;
    p.already_done = is_done({p.path, "", 0});
    emit(std::move(p));
    return;
  }
  std::string bytes;
  ReadablePages readable;
  try {
    bytes = read_bytes(in.path, &p.sha256);
    // A single-page file, or a file that failed as a whole, recorded before.
    if (is_done({p.path, p.sha256, 0})) {
      p.already_done = true;
      emit(std::move(p));
      return;
    }
    readable = image_readable_pages(bytes_of(bytes), bytes.size(), p.path, limits);
    // A file whose pages break off after some readable ones: those pages, then
    // one error record for the damage, as the page after them.
    p.pages = readable.count + (readable.damage.empty() ? 0 : 1);
  } catch (const std::exception& e) {
    p.error = message_naming(p.path, e.what());
    // An unreadable file has no hash; it counts as done if it was unreadable before too.
    if (p.sha256.empty() && is_done({p.path, "", 0})) p.already_done = true;
    p.prepare_ms = ms_since(t0);
    emit(std::move(p));
    return;
  }
  const int pages = p.pages;
  for (int page = 1; page <= pages; ++page) {
    OcrPage item;
    item.path = p.path;
    item.sha256 = p.sha256;
    item.pages = pages;
    item.page = pages > 1 ? page : 0;
    if (is_done({item.path, item.sha256, item.page})) item.already_done = true;
    else if (page > readable.count) item.error = readable.damage;
    else decode_page(bytes, item, /*decode_even_if_seen=*/false);
    item.prepare_ms = page == 1 ? ms_since(t0) : item.prepare_ms;
    if (!emit(std::move(item))) return;
  }
}

OcrPage OcrPreparer::prepare_page(const std::string& path, int page) {
  const auto t0 = Clock::now();
  OcrPage p;
  p.path = path;
  p.page = page;
  try {
    const std::string bytes = read_bytes(path, &p.sha256);
    decode_page(bytes, p, /*decode_even_if_seen=*/true);
  } catch (const std::exception& e) {
    p.error = message_naming(p.path, e.what());
  }
  p.prepare_ms = ms_since(t0);
  return p;
}

void OcrPreparer::decode_page(const std::string& bytes, OcrPage& p, bool decode_even_if_seen) {
  const auto t0 = Clock::now();
  if (!decode_even_if_seen && decoded.count(p.content_key())) {
    p.same_as_earlier = true;
    return;
  }
  try {
    DecodeRequest page_request = request;
    page_request.page = p.page > 0 ? p.page : 1;
    RgbImage rgb = decode_image(bytes_of(bytes), bytes.size(), p.path, limits, page_request);
    p.width = rgb.width;
    p.height = rgb.height;
    p.image = preprocess_image(rgb, preprocessor);
    decoded.insert(p.content_key());
  } catch (const std::exception& e) {
    p.error = message_naming(p.path, e.what());
  }
  p.prepare_ms = ms_since(t0);
}

std::string OcrPreparer::read_bytes(const std::string& path, std::string* sha256) const {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > limits.max_file_bytes) {
    *sha256 = sha256_file_hex(path);
    throw Error(fmt::format("{}: file is {} bytes, over the image file limit of {} bytes", path, int64_t(st.st_size),
                            limits.max_file_bytes));
  }
  // Refuses a FIFO, socket or device (ocr /dev/zero) before opening it.
  std::string bytes = read_text_file(path, limits.max_file_bytes);
  *sha256 = sha256_hex(bytes);
  return bytes;
}

// ---------------------------------------------------------------------------

namespace {

// A bounded queue between the reader thread and the model loop.
class PrefetchQueue {
 public:
  explicit PrefetchQueue(size_t depth) : depth_(depth) {}
  // Blocks while full; false once the consumer has gone.
  bool push(OcrPage item) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return cancelled_ || items_.size() < depth_; });
    if (cancelled_) return false;
    items_.push_back(std::move(item));
    changed_.notify_all();
    return true;
  }
  // Blocks while empty; nothing once the producer has finished and all is
  // taken, or once `interrupted` says so.
  std::optional<OcrPage> pop(const std::function<bool()>& interrupted) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!changed_.wait_for(lock, std::chrono::milliseconds(100), [&] { return finished_ || !items_.empty(); }))
      if (interrupted && interrupted()) return std::nullopt;
    if (items_.empty()) return std::nullopt;
    OcrPage item = std::move(items_.front());
    items_.pop_front();
    changed_.notify_all();
    return item;
  }
  void finish() { set(finished_); }
  void cancel() { set(cancelled_); }

 private:
  void set(bool& flag) {
    std::lock_guard<std::mutex> lock(mutex_);
    flag = true;
    changed_.notify_all();
  }
  const size_t depth_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<OcrPage> items_;
  bool finished_ = false, cancelled_ = false;
};

}  // namespace

struct OcrPrefetcher::State {
  State(const std::vector<ScannedFile>& f, const OcrPreparer& p, size_t depth)
      : files(f), preparer(p), queue(depth) {
    if (p.done) done = *p.done;
    preparer.done = &done;
  }
  std::vector<ScannedFile> files;
  OcrPreparer preparer;
  std::set<OcrRecordKey> done;
  PrefetchQueue queue;
  std::mutex mutex;
  std::condition_variable exit_changed;
  bool exited = false;
};

OcrPrefetcher::OcrPrefetcher(const std::vector<ScannedFile>& files, const OcrPreparer& preparer, size_t depth,
                             std::function<bool()> interrupted)
    : state_(std::make_shared<State>(files, preparer, depth)), interrupted_(std::move(interrupted)) {
  std::thread([state = state_] {
    bool go_on = true;
    for (const ScannedFile& f : state->files) {
      state->preparer.prepare(f, [&](OcrPage p) { return go_on = state->queue.push(std::move(p)); });
      if (!go_on) break;
    }
    state->queue.finish();
    release_thread_hash_state();
    std::lock_guard<std::mutex> lock(state->mutex);
    state->exited = true;
    state->exit_changed.notify_all();
  }).detach();
}

OcrPrefetcher::~OcrPrefetcher() {
  state_->queue.cancel();
  std::unique_lock<std::mutex> lock(state_->mutex);
  const bool stopping = interrupted_ && interrupted_();
  const auto grace = stopping ? std::chrono::seconds(2) : std::chrono::hours(24 * 365);
  state_->exit_changed.wait_for(lock, grace, [&] { return state_->exited; });
}

std::optional<OcrPage> OcrPrefetcher::next() { return state_->queue.pop(interrupted_); }

}  // namespace qvl
