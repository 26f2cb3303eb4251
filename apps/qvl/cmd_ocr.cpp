// qvl ocr: the text of many images, one JSON line per file.
//
// A reader thread reads, hashes, decodes and preprocesses the next files while
// the model works on the current one (qvl/batch/ocr_pages.h). Records are
// written in input order (qvl/batch/ocr_queue.h) and flushed one at a time, so a
// killed run loses only the record being written, and --resume picks up where
// it stopped. This file keeps the flags, the output file, the progress bar and
// the messages.
#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "commands.h"
#include "common.h"
#include "ocr_merge.h"
#include "qvl/batch/ocr_pages.h"
#include "qvl/batch/ocr_queue.h"
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/image_budget.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/file_scan.h"
#include "qvl/io/jsonl.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/shard.h"

namespace qvl::app {
namespace {

using Clock = std::chrono::steady_clock;
using Record = OcrRecord;  // fields in the documented order

const char* const kDefaultPrompt = "Read all the text in the image.";
// Images waiting for the model: enough to hide decoding, few enough that large
// preprocessed images (tens of MB each) do not pile up.
constexpr size_t kPrefetchDepth = 2;

struct OcrFlags {
  ModelOptions model;
  SamplingFlags sampling;
  std::string prompt = kDefaultPrompt;
  std::string system;
  std::string output;
  bool resume = false;
  bool force = false;
  bool wait = false;  // for another run's lock on --output
  bool recursive = false;
  int64_t batch = 1;
  std::string glob;
  std::string shard;               // --shard K/N | slurm | slurm/N ("": all files)
  std::vector<std::string> merge;  // --merge: shard outputs to join instead of running the model
  std::vector<std::string> inputs;
};

// ---------------------------------------------------------------------------
// Output: a JSONL file that is never truncated by accident, or stdout.

// What a record stands for: (file, sha256 or "", page or 0).
using RecordKey = OcrRecordKey;  // qvl/batch/ocr_pages.h

// Another run holds the output's lock (exit kBusy).
struct OutputBusy : Error {
  using Error::Error;
};

// A cut-off record of ours: what a kill in the middle of a write leaves.
bool is_cut_record(const std::string& line) {
  static const std::string kStart = "{\"file\":";
  if (line.size() < kStart.size()) return kStart.compare(0, line.size(), line) == 0;
  return line.compare(0, kStart.size(), kStart) == 0;
}

// The process holding a flock() on the file, from /proc/locks; 0 if not found.
int64_t flock_holder(const struct stat& st) {
  std::FILE* f = std::fopen("/proc/locks", "r");
  if (!f) return 0;
  const std::string id = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev), uint64_t(st.st_ino));
  // Some file systems (overlayfs) show another device there than stat() gives:
  // then the inode alone decides, if only one lock matches it.
  const std::string inode_suffix = fmt::format(":{}", uint64_t(st.st_ino));
  char line[512];
  int64_t pid = 0, by_inode = 0;
  int inode_matches = 0;
  while (pid == 0 && std::fgets(line, sizeof line, f)) {
    // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (waiters read "1: -> FLOCK ...")
    char type[32] = {}, id_text[128] = {};
    long long holder = 0;
    if (std::sscanf(line, "%*d: %31s %*s %*s %lld %127s", type, &holder, id_text) != 3 ||
        std::string(type) != "FLOCK")
      continue;
    const std::string lock_id = id_text;
    if (lock_id == id) pid = holder;
    if (lock_id.size() > inode_suffix.size() &&
        lock_id.compare(lock_id.size() - inode_suffix.size(), inode_suffix.size(), inode_suffix) == 0) {
      by_inode = holder;
      inode_matches += 1;
    }
  }
  std::fclose(f);
  return pid != 0 ? pid : inode_matches == 1 ? by_inode : 0;
}

struct OutputFile {
  std::FILE* file = stdout;
  std::string name = "<stdout>";
  bool starts_mid_line = false;  // the last record lacks only its newline
  bool truncate_before_writing = false;
  struct stat identity {};       // of the --output file
  std::set<RecordKey> done;  // records already in it

  ~OutputFile() {
    if (file != stdout) std::fclose(file);  // also releases the lock
  }

  // Checked before the model loads, so a bad --output costs nothing. An
  // output that is one of the inputs is refused before anything is written
  // to it, whatever the flags. Takes an exclusive lock on the file for the
  // whole run: a second qvl ocr on the same output (a cron job started again
  // before the last run finished) stops with OutputBusy, or with `wait` waits
  // for it.
  void open(const OcrFlags& f, bool quiet, const std::vector<ScannedFile>& inputs) {
    if (f.output.empty()) {
      // `>> photo.png` would append to an input as surely as --output would.
      struct stat st {};
      if (::fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode))
        refuse_output_among_inputs(inputs, uint64_t(st.st_dev), uint64_t(st.st_ino), "stdout");
      return;
    }
    struct stat st {};
    const bool exists = ::stat(f.output.c_str(), &st) == 0;
    if (exists && S_ISDIR(st.st_mode)) throw Error(fmt::format("--output {} is a directory", f.output));
    if (exists && !S_ISREG(st.st_mode))
      throw Error(fmt::format("--output {} is not a regular file ({}): leave --output out to write to stdout", f.output,
                              non_regular_kind(st.st_mode)));
    const bool non_empty = exists && st.st_size > 0;
    if (non_empty && !f.resume && !f.force)
      throw Error(fmt::format("{} already exists and is not empty: pass --resume to add the files it lacks, or "
                              "--force to overwrite it",
                              f.output));
    // Append mode: nothing is lost until --force has a model to run.
    const int fd = ::open(f.output.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666);
    if (fd < 0) throw Error(fmt::format("{}: cannot open for writing: {}", f.output, std::strerror(errno)));
    file = ::fdopen(fd, "a");
    if (!file) {
      ::close(fd);
      file = stdout;
      throw Error(fmt::format("{}: cannot open for writing: {}", f.output, std::strerror(errno)));
    }
    name = f.output;
    if (::fstat(fd, &identity) != 0 || !S_ISREG(identity.st_mode))
      throw Error(fmt::format("--output {} is not a regular file", f.output));
    refuse_output_among_inputs(inputs, uint64_t(identity.st_dev), uint64_t(identity.st_ino), "--output " + f.output);
    lock(fd, f.wait, quiet);
    truncate_before_writing = f.force && non_empty;
    if (f.resume) read_done(fd, quiet);
  }

  void truncate_if_forced() {
    if (truncate_before_writing && ::ftruncate(::fileno(file), 0) != 0)
      throw Error(fmt::format("{}: cannot truncate: {}", name, std::strerror(errno)));
    truncate_before_writing = false;
  }

  void write(const Record& record) {
    std::string line = starts_mid_line ? "\n" : "";
    starts_mid_line = false;
    // Error messages quote paths that need not be UTF-8 ("file" keeps them
    // exactly: put_path); replacing bad bytes there beats losing the record.
    line += record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), file) != line.size() || std::fflush(file) != 0)
      throw Error(fmt::format("{}: write failed: {}", name, std::strerror(errno)));
  }

 private:
  void lock(int fd, bool wait, bool quiet) {
    bool told = false;
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK)
        throw Error(fmt::format("{}: cannot lock: {}", name, std::strerror(errno)));
      const int64_t pid = flock_holder(identity);
      const std::string holder = pid > 0 ? fmt::format(" (pid {})", pid) : "";
      if (!wait)
        throw OutputBusy(fmt::format("another qvl ocr is writing {}{}: try again when it has finished, or pass "
                                     "--wait to wait for it",
                                     name, holder));
      if (!told && !quiet) fmt::print(stderr, "qvl ocr: waiting for another qvl ocr writing {}{}\n", name, holder);
      told = true;
      if (interrupted()) throw OutputBusy(fmt::format("interrupted while waiting for the lock on {}", name));
      ::usleep(100 * 1000);
    }
  }

  // --resume: what the file already holds. A partial last line (a killed
  // run's cut-off record) is removed before anything is appended; a file that
  // is not qvl's JSONL is refused rather than appended to.
  void read_done(int fd, bool quiet) {
    std::string text;
    char buffer[1 << 16];
    for (off_t at = 0;;) {
      const ssize_t n = ::pread(fd, buffer, sizeof buffer, at);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error(fmt::format("{}: read error: {}", name, std::strerror(errno)));
      if (n == 0) break;
      text.append(buffer, size_t(n));
      at += n;
    }
    auto refuse = [&](int64_t line_no) {
      return Error(fmt::format("{}: line {} is not a qvl ocr record: refusing to append to a file that is not "
                               "qvl ocr's JSONL (choose another --output, or --force to overwrite it)",
                               name, line_no));
    };
    size_t start = 0;
    for (int64_t line_no = 1; start < text.size(); ++line_no) {
      const size_t newline = text.find('\n', start);
      const size_t end = newline == std::string::npos ? text.size() : newline;
      const std::string line = text.substr(start, end - start);
      const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      const std::optional<std::string> file = r.is_object() ? get_path(r, "file") : std::nullopt;
      const bool record = file.has_value();
      if (record) {
        auto sha_it = r.find("sha256");
        const bool has_sha = sha_it != r.end() && sha_it->is_string();
        auto page_it = r.find("page");
        const bool has_page = page_it != r.end() && page_it->is_number_integer();
        done.insert({*file, has_sha ? sha_it->get<std::string>() : std::string(), has_page ? page_it->get<int>() : 0});
      }
      if (newline == std::string::npos) {  // the last line has no newline
        if (record) {
          starts_mid_line = true;  // complete but for its newline: keep it
        } else if (is_cut_record(line)) {
          if (::ftruncate(fd, off_t(start)) != 0)
            throw Error(fmt::format("{}: cannot remove the partial last line: {}", name, std::strerror(errno)));
          if (!quiet)
            fmt::print(stderr, "qvl ocr: removed the partial last line of {} ({} bytes) left by an interrupted run\n",
                       name, line.size());
        } else {
          throw refuse(line_no);
        }
        break;
      }
      start = newline + 1;
      // Blank lines are harmless; a cut-off record closed by an older qvl's --resume is skipped.
      if (!record && line.find_first_not_of(" \t\r") != std::string::npos && !is_cut_record(line))
        throw refuse(line_no);
    }
  }
};

// The reader side (qvl/batch/ocr_pages.h): files read, hashed, decoded and
// preprocessed on their own thread, kPrefetchDepth pages ahead of the model.
using Preparer = OcrPreparer;
using Prefetcher = OcrPrefetcher;

// ---------------------------------------------------------------------------
// Progress on a terminal.

class ProgressBar {
 public:
  ProgressBar(size_t total, bool enabled) : total_(total), enabled_(enabled), start_(Clock::now()) {}
  // A multi-page file: its pages are counted one by one from now on.
  void add_pages(size_t more) {
    total_ += more;
    unit_ = "page";
  }

  // `finished` files are behind us; `worked` of them were not skipped (--resume),
  // and only those say how fast the rest will go.
  void draw(size_t finished, size_t worked, const std::string& current) {
    if (!enabled_) return;
    constexpr int kWidth = 24;
    const int filled = total_ ? int(kWidth * finished / total_) : kWidth;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    std::string rate = "--", eta = "--";
    if (worked > 0 && elapsed > 0) {
      const double per_s = double(worked) / elapsed;
      rate = per_s >= 1 ? fmt::format("{:.1f} {}s/s", per_s, unit_) : fmt::format("{:.1f} s/{}", 1 / per_s, unit_);
      eta = duration(double(total_ - finished) / per_s);
    }
    std::string name = current.size() > 40 ? "..." + current.substr(current.size() - 37) : current;
    fmt::print(stderr, "\r\033[K[{}{}] {}/{}  {}  ETA {}  {}", std::string(size_t(filled), '#'),
               std::string(size_t(kWidth - filled), '.'), finished, total_, rate, eta, name);
    std::fflush(stderr);
    drawn_ = true;
  }
  void clear() {
    if (drawn_) fmt::print(stderr, "\r\033[K");
    drawn_ = false;
  }
  size_t total() const { return total_; }
  const char* unit() const { return unit_; }

 private:
  static std::string duration(double s) {
    const int64_t t = int64_t(s + 0.5);
    return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                     : fmt::format("{}:{:02}", t / 60, t % 60);
  }
  size_t total_;
  const char* unit_ = "file";
  bool enabled_;
  bool drawn_ = false;
  Clock::time_point start_;
};

std::vector<Message> ocr_turn(const OcrFlags& f, const std::string& path) {
  std::vector<Message> turn;
  if (!f.system.empty()) turn.push_back({"system", {{ContentPart::Kind::Text, f.system, ""}}});
  turn.push_back({"user", {{ContentPart::Kind::Image, "", path}, {ContentPart::Kind::Text, f.prompt, ""}}});
  return turn;
}

// SIGTERM stops a batch the way Ctrl-C does (the flag lives in common.cpp).
void on_sigterm(int) { std::raise(SIGINT); }

// What `-` got when it is not a list of paths (an image piped in by mistake),
// or "" when it looks like one. File names may be any bytes but NUL, so only
// an image's first bytes or a NUL give it away; the first 64 KiB decide.
std::string binary_stdin_kind(const std::string& text) {
  const size_t head = std::min<size_t>(text.size(), 64 * 1024);
  const ImageFormat format = detect_image_format(reinterpret_cast<const uint8_t*>(text.data()), head);
  if (format != ImageFormat::Unknown) return fmt::format("a {} image", image_format_name(format));
  if (std::memchr(text.data(), '\0', head)) return "binary data (NUL bytes)";
  return "";
}

std::vector<ScannedFile> collect_inputs(const OcrFlags& f) {
  std::vector<std::string> inputs;
  for (const std::string& in : f.inputs) {
    if (in != "-") {
      inputs.push_back(in);
      continue;
    }
    const std::string text = read_stdin();
    if (const std::string kind = binary_stdin_kind(text); !kind.empty())
      throw Error(fmt::format("stdin holds {}, not a list of paths: qvl ocr - reads newline-separated paths (give "
                              "an image file as a path argument)",
                              kind));
    for (std::string& p : split_path_lines(text)) inputs.push_back(std::move(p));
  }
  ScanOptions scan;
  scan.recursive = f.recursive;
  scan.glob = f.glob;
  return expand_inputs(inputs, scan);
}

// The model side: the library's OcrQueue (qvl/batch/ocr_queue.h) keeps the
// records in input order and answers identical pages once; this wires it to
// the session, the output file and the progress bar.
class OcrRun {
 public:
  OcrRun(const OcrFlags& flags, Session& session, const SamplingOptions& sampling, OutputFile& out,
         const Preparer& preparer, ProgressBar& bar)
      : flags_(flags), session_(session), sampling_(sampling), fallback_(preparer), queue_(hooks(out, bar)) {}

  void run(Prefetcher& prefetch) {
    prefetch_ = &prefetch;
    queue_.run([&](const OcrNextRequest& next, const OcrDone& done) {
      session_.ask_batch(
          flags_.batch,
          [&]() -> std::optional<BatchRequest> {
            std::optional<OcrRequest> r = next();
            if (!r) return std::nullopt;
            BatchRequest req;
            req.tag = r->tag;
            req.turn = ocr_turn(flags_, r->path);
            req.images.push_back(std::move(r->image));
            return req;
          },
          sampling_, [&](BatchResult r) { done(r.tag, ocr_answer(std::move(r))); });
    });
  }
  const OcrCounts& counts() const { return queue_.counts(); }
  size_t finished() const { return queue_.finished(); }

 private:
  OcrQueueHooks hooks(OutputFile& out, ProgressBar& bar) {
    OcrQueueHooks h;
    h.next_page = [this] { return prefetch_->next(); };
    h.prepare_again = [this](const std::string& path, int page) { return fallback_.prepare_page(path, page); };
    h.write = [&out](const OcrRecord& r) { out.write(r); };
    h.interrupted = [] { return interrupted(); };
    h.on_more_pages = [&bar](size_t more) { bar.add_pages(more); };
    h.on_progress = [&bar](size_t written, size_t worked, const std::string& current) {
      bar.draw(written, worked, current);
    };
    const bool quiet = flags_.model.quiet;
    h.on_interrupt = [&bar, quiet](size_t in_flight) {
      if (quiet) return;
      bar.clear();
      if (in_flight == 0)
        fmt::print(stderr, "qvl ocr: interrupted, stopping: no file is in progress\n");
      else
        fmt::print(stderr, "qvl ocr: interrupted, finishing the {} file(s) started (Ctrl-C again to quit now)\n",
                   in_flight);
    };
    if (flags_.model.verbose && !quiet)
      h.on_computed = [&bar](const std::string& path, int page, const OcrAnswer& a, double ms) {
        bar.clear();
        fmt::print(stderr,
                   "{}{}: {} image tokens, {} tokens ({}), {:.0f} ms (vision {:.0f} ms, prefill {:.0f} ms, "
                   "decode {:.0f} ms)\n",
                   path, page > 0 ? fmt::format(" page {}", page) : "", a.image_tokens, a.tokens.size(),
                   a.stop_reason, ms, a.vision_s * 1e3, a.prefill_s * 1e3, a.decode_s * 1e3);
      };
    return h;
  }

  OcrAnswer ocr_answer(BatchResult r) const {
    OcrAnswer a;
    a.error = std::move(r.error);
    if (!a.error.empty()) return a;
    a.text = std::move(r.answer.text);
    a.tokens = std::move(r.answer.tokens);
    a.stop_reason = std::move(r.answer.stop_reason);
    a.image_tokens =
        r.answer.grids.empty() ? 0 : r.answer.grids[0].tokens(session_.config().vision.spatial_merge_size);
    a.vision_s = r.answer.timings.vision_s;
    a.prefill_s = r.answer.timings.prefill_s;
    a.decode_s = r.answer.timings.decode_s;
    return a;
  }

  const OcrFlags& flags_;
  Session& session_;
  const SamplingOptions& sampling_;
  Preparer fallback_;  // the model loop's own: the reader thread's is busy
  Prefetcher* prefetch_ = nullptr;
  OcrQueue queue_;
};

// Each path once: the same path given twice, or found by two folder
// arguments, gets one record.
std::vector<ScannedFile> unique_inputs(std::vector<ScannedFile> files, bool quiet) {
  std::set<std::string> seen, told;
  std::vector<ScannedFile> kept;
  for (ScannedFile& file : files) {
    if (!seen.insert(file.path).second) {
      if (told.insert(file.path).second && !quiet)
        fmt::print(stderr, "qvl ocr: {} is given more than once: it gets one record\n", file.path);
      continue;
    }
    kept.push_back(std::move(file));
  }
  return kept;
}

// The session's preprocessor, with a smaller image budget when one page at
// the full budget would not leave the prompt and some of the answer in
// --max-context (the pages are prepared ahead, so they cannot wait for
// Session::ask to shrink them).
PreprocessorConfig fit_image_budget(const OcrFlags& f, const Session& session) {
  PreprocessorConfig cfg = session.preprocessor_config();
  const int64_t text_tokens = session.request_text_tokens(ocr_turn(f, ""));
  const int64_t answer_room = std::min<int64_t>(f.sampling.max_new_tokens, 256);
  const int64_t ppt = pixels_per_image_token(cfg);
  const int64_t room = f.model.max_context - 1 - text_tokens - answer_room;
  const int64_t least = (cfg.min_pixels + ppt - 1) / ppt;
  if (room * ppt >= cfg.max_pixels || room < least) return cfg;  // fits, or nothing helps (each page says so)
  cfg.max_pixels = room * ppt;
  if (!f.model.quiet)
    fmt::print(stderr, "qvl ocr: --max-context {} leaves room for {} image tokens per page: pages are shrunk to fit\n",
               f.model.max_context, room);
  return cfg;
}

int run_ocr(const OcrFlags& f) {
  const auto t_start = Clock::now();
  // Everything that can fail cheaply fails before the model loads. The paths
  // come first (stdin for "-"): until they are read, Ctrl-C and SIGTERM end
  // qvl the default way; from then on they finish the files started.
  std::vector<ScannedFile> files = collect_inputs(f);
  if (!f.merge.empty()) return run_ocr_merge({f.merge, f.output, f.force, f.model.quiet}, files);
  install_interrupt_handler();
  std::signal(SIGTERM, on_sigterm);
  OutputFile out;
  try {
    out.open(f, f.model.quiet, files);
  } catch (const OutputBusy& e) {
    fmt::print(stderr, "qvl: error: {}\n", e.what());
    return interrupted() ? kInterrupted : kBusy;
  }
  SessionOptions session_options = make_session_options(f.model);
  check_prompt_length(ocr_turn(f, ""), f.model.max_context);
  files = unique_inputs(std::move(files), f.model.quiet);
  const size_t listed = files.size();
  if (!f.shard.empty()) {
    const ShardSpec spec = parse_shard_spec(f.shard);
    files = files_in_shard(std::move(files), spec);
    if (!f.model.quiet)
      fmt::print(stderr, "qvl ocr: shard {}/{}: {} of the {} files\n", spec.index, spec.count, files.size(), listed);
    if (files.empty()) return kOk;
  }
  if (files.empty()) {
    if (!f.model.quiet)
      fmt::print(stderr, "qvl ocr: no image files found in {} (folders give their files named {}{})\n",
                 fmt::join(f.inputs, " "),
                 f.glob.empty() ? "*.png, *.jpg, *.jpeg, *.webp, *.tif, *.tiff, *.bmp, *.gif or *.pdf" : f.glob,
                 f.recursive ? "" : "; --recursive descends into subfolders");
    return kOk;
  }

  configure_threads_for(session_options);
  Session session(session_options);
  SamplingOptions sampling = make_sampling(f.sampling, session.generation_config());
  if (!f.sampling.temperature) sampling.greedy = true;  // OCR wants the most likely reading
  out.truncate_if_forced();

  Preparer preparer;
  preparer.preprocessor = fit_image_budget(f, session);
  preparer.limits = session.image_limits();
  preparer.request = session.decode_request();
  preparer.request.target_max_pixels = preparer.preprocessor.max_pixels;
  preparer.done = &out.done;

  ProgressBar bar(files.size(), !f.model.quiet && ::isatty(STDERR_FILENO));
  OcrRun ocr(f, session, sampling, out, preparer, bar);
  {
    Prefetcher prefetch(files, preparer, kPrefetchDepth, [] { return interrupted(); });
    ocr.run(prefetch);
  }
  bar.clear();
  const OcrCounts& n = ocr.counts();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (!f.model.quiet) {
    fmt::print(stderr, "qvl ocr: {}done {}, failed {}, skipped {}, computed {}, reused {}, {} of {} {}s, {:.1f} s\n",
               interrupted() ? "interrupted: " : "", n.done, n.failed, n.skipped, n.computed, n.reused,
               ocr.finished(), bar.total(), bar.unit(), elapsed);
    const SessionStats st = session.stats();
    if (f.model.verbose && st.decode_s > 0)
      fmt::print(stderr, "qvl ocr: decoding {} tokens took {:.1f} s: {:.2f} tokens/s with --batch {}\n",
                 st.decoded_tokens, st.decode_s, double(st.decoded_tokens) / st.decode_s, f.batch);
  }
  if (interrupted()) return kInterrupted;
  return n.failed > 0 ? kSomeFailed : kOk;
}

}  // namespace

void register_ocr(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<OcrFlags>();
  f->sampling.max_new_tokens = 1024;  // a page of text is longer than a chat answer
  CLI::App* cmd = app.add_subcommand(
      "ocr",
      "Read the text of images, folders of images or a list of paths on stdin; one JSON line per file, or per "
      "page of a PDF or multi-page TIFF (file, [page,] sha256, width, height, text, tokens, ms, stop_reason; or "
      "file, [page,] sha256, error). Greedy unless --temperature is given");
  f->model.default_image_tokens = kDefaultOcrImageTokens;  // before add_model_options: its help shows it
  add_model_options(cmd, f->model);
  add_page_options(cmd, nullptr, &f->model.dpi, &f->model.page_timeout_s);
  add_sampling_options(cmd, f->sampling);
  cmd->add_option("--prompt", f->prompt, "What to ask about each image")->capture_default_str();
  cmd->add_option("--system", f->system, "System message");
  CLI::Option* output =
      cmd->add_option("-o,--output", f->output, "JSONL file to write (default: stdout); never silently overwritten");
  CLI::Option* resume =
      cmd->add_flag("--resume", f->resume,
                    "Append to --output, skipping files and pages already in it (same path, sha256 and page)");
  CLI::Option* force = cmd->add_flag("--force", f->force, "Overwrite a non-empty --output");
  CLI::Option* wait = cmd->add_flag(
      "--wait", f->wait, "When another qvl ocr is writing --output, wait for it to finish instead of exiting 75");
  resume->needs(output);
  resume->excludes(force);
  wait->needs(output);
  cmd->add_option("-b,--batch", f->batch,
                  "Files answered together: their decoding shares each read of the weights, so throughput grows "
                  "with the batch (each running file holds its own KV cache)")
      ->check(CLI::Range(int64_t(1), int64_t(64)))
      ->capture_default_str();
  cmd->add_flag("-r,--recursive", f->recursive, "Descend into subfolders of folder arguments");
  cmd->add_option("--glob", f->glob,
                  "Folder scans take files whose name matches this fnmatch pattern instead of the image extensions "
                  "(png, jpg, jpeg, webp, tif, tiff, bmp, gif, pdf)");
  CLI::Option* shard = cmd->add_option(
      "--shard", f->shard,
      "Handle only shard K of N (K from 0): a file's shard is a hash of its path relative to the folder "
      "argument, so files added later never move; 'slurm' reads SLURM_ARRAY_TASK_ID and "
      "SLURM_ARRAY_TASK_COUNT, 'slurm/N' only the former");
  shard->check(CLI::Validator(
      [](std::string& text) {
        try {
          parse_shard_spec(text);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      },
      "K/N|slurm|slurm/N", ""));
  CLI::Option* merge = cmd->add_option(
      "--merge", f->merge,
      "Join these outputs of --shard runs into --output (or stdout) as one run over PATHS would have written "
      "it, checking that every input has its records exactly once; give the same PATHS, --recursive and "
      "--glob as the shard runs (other flags are ignored), before --merge or after --");
  merge->excludes(shard);
  merge->excludes(resume);
  cmd->add_option("paths", f->inputs, "Images, folders, or - to read newline-separated paths from stdin")
      ->required();
  cmd->callback([f, &exit_code] { exit_code = run_ocr(*f); });
}

}  // namespace qvl::app
