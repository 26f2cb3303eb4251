// qvl ocr --merge: reads every shard output once to index its records (file,
// page, sha256, where the line is), plans the merged file with
// plan_merge(), and only if the shard outputs add up to one run over the
// inputs writes it: to a temporary file beside --output, renamed over it at
// the end, so an interrupted merge or a refused one leaves nothing behind.
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "ocr_merge.h"
#include "qvl/error.h"
#include "qvl/io/jsonl.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/ocr_merge.h"

namespace qvl::app {
namespace {

// Examples of each kind of problem printed before the error.
constexpr size_t kShownProblems = 10;

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// A shard output, open and share-locked for the whole merge: a shard run still
// writing it holds an exclusive lock, and no new one can start meanwhile.
struct ShardOutput {
  std::string path;
  int fd = -1;
  struct stat identity {};
};

class ShardOutputs {
 public:
  ~ShardOutputs() {
    for (ShardOutput& s : outputs_)
      if (s.fd >= 0) ::close(s.fd);
  }

  void open(const std::vector<std::string>& paths) {
    raise_open_file_limit(paths.size());
    for (const std::string& path : paths) {
      ShardOutput s;
      s.path = path;
      s.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
      if (s.fd < 0)
        throw Error(fmt::format("{}: cannot open the shard output: {}", path, std::strerror(errno)));
      outputs_.push_back(s);
      if (::fstat(s.fd, &outputs_.back().identity) != 0)
        throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(errno)));
      const struct stat& st = outputs_.back().identity;
      if (S_ISDIR(st.st_mode))
        throw Error(fmt::format("{} is a directory, not a shard output: --merge takes the shard outputs; give "
                                "the input paths before --merge or after --",
                                path));
      if (!S_ISREG(st.st_mode))
        throw Error(fmt::format("{}: not a regular file ({})", path, non_regular_kind(st.st_mode)));
      for (size_t i = 0; i + 1 < outputs_.size(); ++i)
        if (same_file(outputs_[i].identity, st))
          throw Error(fmt::format("{} is given twice to --merge (also as {})", path, outputs_[i].path));
      while (::flock(s.fd, LOCK_SH | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK)
          throw Error(fmt::format("{} is being written by a running qvl ocr: merge once every shard run has "
                                  "finished",
                                  path));
        throw Error(fmt::format("{}: cannot lock: {}", path, std::strerror(errno)));
      }
    }
  }

  const ShardOutput& operator[](size_t i) const { return outputs_[i]; }
  size_t size() const { return outputs_.size(); }

  // The line of a record, read back.
  std::string line(const ShardRecord& r) const {
    std::string text(r.length, '\0');
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::pread(outputs_[r.source].fd, &text[done], text.size() - done, off_t(r.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw Error(fmt::format("{}: read error{}", outputs_[r.source].path,
                                n < 0 ? std::string(": ") + std::strerror(errno) : " (the file shrank)"));
      done += size_t(n);
    }
    return text;
  }

 private:
  // A merge of a thousand shards keeps a thousand files open.
  static void raise_open_file_limit(size_t wanted) {
    struct rlimit lim {};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= wanted + 64) return;
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, wanted + 64);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  std::vector<ShardOutput> outputs_;
};

// What a killed run leaves: the start of a record ("{"file":...), cut anywhere.
bool is_cut_record(const std::string& line) {
  static const std::string kStart = "{\"file\":";
  if (line.size() < kStart.size()) return kStart.compare(0, line.size(), line) == 0;
  return line.compare(0, kStart.size(), kStart) == 0;
}

// A positive integer field of a record ("page", "pages"); 0 when absent.
template <typename MakeError>
int64_t page_number(const nlohmann::json& r, const char* key, const MakeError& error) {
  auto it = r.find(key);
  if (it == r.end()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 1)
    throw error(fmt::format("\"{}\" is not a page number", key));
  return it->get<int64_t>();
}

struct IndexCounts {
  size_t cut_lines = 0;  // partial last lines and cut records closed by a resume: left out
};

// Every record of shard output `source`, appended to `records`.
void index_shard_output(const ShardOutput& out, size_t source, std::vector<ShardRecord>& records,
                        IndexCounts& counts) {
  const int fd = ::dup(out.fd);
  std::FILE* f = fd >= 0 ? ::fdopen(fd, "r") : nullptr;
  if (!f) {
    if (fd >= 0) ::close(fd);
    throw Error(fmt::format("{}: cannot read: {}", out.path, std::strerror(errno)));
  }
  char* buffer = nullptr;
  size_t capacity = 0;
  uint64_t offset = 0;
  int64_t line_no = 0;
  try {
    for (ssize_t n; (n = ::getline(&buffer, &capacity, f)) > 0; offset += uint64_t(n)) {
      line_no += 1;
      const bool has_newline = buffer[n - 1] == '\n';
      const std::string line(buffer, size_t(n) - (has_newline ? 1 : 0));
      const nlohmann::json r = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!(r.is_object() && r.contains("file") && r["file"].is_string())) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        if (is_cut_record(line)) {
          counts.cut_lines += 1;
          continue;
        }
        throw Error(fmt::format("{}: line {} is not a qvl ocr record: --merge takes the JSONL outputs of qvl ocr "
                                "--shard (give the input paths before --merge or after --)",
                                out.path, line_no));
      }
      auto field_error = [&](const std::string& what) {
        return Error(fmt::format("{}: line {}: {}", out.path, line_no, what));
      };
      ShardRecord rec;
      const std::optional<std::string> file = get_path(r, "file");
      if (!file) throw field_error("\"file_b64\" is not base64");
      rec.file = *file;
      rec.page = page_number(r, "page", field_error);
      rec.pages = page_number(r, "pages", field_error);
      if (auto it = r.find("sha256"); it != r.end() && it->is_string()) rec.sha256 = it->get<std::string>();
      rec.is_error = r.contains("error");
      rec.duplicate_of = get_path(r, "duplicate_of").value_or("");
      rec.source = source;
      rec.offset = offset;
      rec.length = line.size();
      records.push_back(std::move(rec));
    }
    if (std::ferror(f)) throw Error(fmt::format("{}: read error: {}", out.path, std::strerror(errno)));
  } catch (...) {
    std::free(buffer);
    std::fclose(f);
    throw;
  }
  std::free(buffer);
  std::fclose(f);
}

// Each path once, as a single run takes them.
std::vector<std::string> unique_paths(const std::vector<ScannedFile>& inputs) {
  std::set<std::string> seen;
  std::vector<std::string> paths;
  for (const ScannedFile& f : inputs)
    if (seen.insert(f.path).second) paths.push_back(f.path);
  return paths;
}

// The merged file replaces --output: never one of the inputs, nor stdout
// appending to one.
void refuse_output_among(const std::vector<ScannedFile>& inputs, const std::string& output) {
  struct stat st {};
  if (output.empty() ? ::fstat(STDOUT_FILENO, &st) == 0 && S_ISREG(st.st_mode) : ::stat(output.c_str(), &st) == 0)
    refuse_output_among_inputs(inputs, uint64_t(st.st_dev), uint64_t(st.st_ino),
                               output.empty() ? "stdout" : "--output " + output);
}

// Prints what is wrong and throws; nothing has been written.
void refuse(const MergePlan& plan, const ShardOutputs& shards) {
  auto show = [](const std::string& what, const std::vector<std::string>& items) {
    for (size_t i = 0; i < items.size() && i < kShownProblems; ++i)
      fmt::print(stderr, "qvl ocr --merge: {}: {}\n", what, items[i]);
    if (items.size() > kShownProblems)
      fmt::print(stderr, "qvl ocr --merge: ... and {} more {}\n", items.size() - kShownProblems, what);
  };
  show("no record", plan.missing);
  std::vector<std::string> overlaps;
  for (const auto& o : plan.overlapping)
    overlaps.push_back(fmt::format("{} (in {} and {})", o.file, shards[o.first_source].path,
                                   shards[o.second_source].path));
  show("in two shard outputs", overlaps);
  show("not among the inputs", plan.unexpected);
  show("missing pages", plan.page_gaps);
  std::vector<std::string> parts;
  if (!plan.missing.empty())
    parts.push_back(fmt::format("{} input(s) have no record (run their shard again with --resume)",
                                plan.missing.size()));
  if (!plan.overlapping.empty())
    parts.push_back(fmt::format("{} file(s) are in two shard outputs (shards of different runs or of another N?)",
                                plan.overlapping.size()));
  if (!plan.unexpected.empty())
    parts.push_back(fmt::format("{} file(s) have records but are not among the inputs (give --merge the same "
                                "paths, --recursive and --glob as the shard runs)",
                                plan.unexpected.size()));
  if (!plan.page_gaps.empty())
    parts.push_back(fmt::format("{} file(s) lack pages", plan.page_gaps.size()));
  std::string joined;
  for (const std::string& p : parts) joined += (joined.empty() ? "" : "; ") + p;
  throw Error("the shard outputs do not add up to one run over the inputs: " + joined + "; nothing written");
}

// The merged file: a temporary file beside --output until it is complete.
class MergedOutput {
 public:
  explicit MergedOutput(const std::string& path) : path_(path) {
    if (path.empty()) return;
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    std::string tmpl = (slash == std::string::npos ? "" : dir) + "." + base + ".merging-XXXXXX";
    const int fd = ::mkstemp(&tmpl[0]);
    if (fd < 0) throw Error(fmt::format("{}: cannot create a file in {}: {}", path, dir, std::strerror(errno)));
    temp_ = tmpl;
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);  // as an ordinary new file, not mkstemp's 0600
    file_ = ::fdopen(fd, "w");
    if (!file_) {
      ::close(fd);
      throw Error(fmt::format("{}: cannot write: {}", temp_, std::strerror(errno)));
    }
  }
  ~MergedOutput() {
    if (file_ && file_ != stdout) std::fclose(file_);
    if (!temp_.empty()) ::unlink(temp_.c_str());  // not committed: leave nothing behind
  }

  void write(const std::string& line) {
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fputc('\n', file_) == EOF)
      throw Error(fmt::format("{}: write failed: {}", name(), std::strerror(errno)));
  }

  void commit() {
    if (std::fflush(file_) != 0) throw Error(fmt::format("{}: write failed: {}", name(), std::strerror(errno)));
    if (temp_.empty()) return;
    if (::fsync(::fileno(file_)) != 0)
      throw Error(fmt::format("{}: write failed: {}", temp_, std::strerror(errno)));
    if (std::fclose(file_) != 0) {
      file_ = nullptr;
      throw Error(fmt::format("{}: write failed: {}", temp_, std::strerror(errno)));
    }
    file_ = nullptr;
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      throw Error(fmt::format("{}: cannot rename {} to it: {}", path_, temp_, std::strerror(errno)));
    temp_.clear();
  }

  std::string name() const { return path_.empty() ? "<stdout>" : path_; }

 private:
  std::string path_;
  std::string temp_;
  std::FILE* file_ = stdout;
};

}  // namespace

int run_ocr_merge(const OcrMergeOptions& options, const std::vector<ScannedFile>& inputs) {
  // The output first: a refusal costs nothing.
  struct stat out_stat {};
  const bool out_exists = !options.output.empty() && ::stat(options.output.c_str(), &out_stat) == 0;
  if (out_exists && S_ISDIR(out_stat.st_mode)) throw Error(fmt::format("--output {} is a directory", options.output));
  if (out_exists && !S_ISREG(out_stat.st_mode))
    throw Error(fmt::format("--output {} is not a regular file ({})", options.output,
                            non_regular_kind(out_stat.st_mode)));
  refuse_output_among(inputs, options.output);
  if (out_exists && out_stat.st_size > 0 && !options.force)
    throw Error(fmt::format("{} already exists and is not empty: pass --force to replace it with the merge",
                            options.output));

  ShardOutputs shards;
  shards.open(options.shard_outputs);
  for (size_t i = 0; i < shards.size(); ++i)
    if (out_exists && same_file(shards[i].identity, out_stat))
      throw Error(fmt::format("--output {} is also a shard output given to --merge", options.output));

  std::vector<ShardRecord> records;
  IndexCounts counts;
  for (size_t i = 0; i < shards.size(); ++i) index_shard_output(shards[i], i, records, counts);
  const std::vector<std::string> paths = unique_paths(inputs);
  const MergePlan plan = plan_merge(paths, records);
  if (!plan.complete()) refuse(plan, shards);

  install_interrupt_handler();
  MergedOutput out(options.output);
  size_t errors = 0;
  for (const MergePlan::Entry& e : plan.order) {
    if (interrupted()) {
      fmt::print(stderr, "qvl: error: interrupted: {} not written\n", out.name());
      return kInterrupted;
    }
    const ShardRecord& r = records[e.record];
    errors += r.is_error ? 1 : 0;
    std::string line = shards.line(r);
    if (e.rewrite) {
      // Field order kept; a new "duplicate_of" goes last, where qvl ocr puts it.
      nlohmann::ordered_json record = nlohmann::ordered_json::parse(line);
      erase_path(record, "duplicate_of");
      if (!e.duplicate_of.empty()) put_path(record, "duplicate_of", e.duplicate_of);
      line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    out.write(line);
  }
  out.commit();
  if (!options.quiet) {
    std::string notes;
    if (plan.superseded) notes += fmt::format("; {} older record(s) of changed files left out", plan.superseded);
    if (counts.cut_lines) notes += fmt::format("; {} cut-off line(s) of killed runs left out", counts.cut_lines);
    if (plan.duplicates_set) notes += fmt::format("; duplicate_of set on {} record(s)", plan.duplicates_set);
    fmt::print(stderr, "qvl ocr --merge: {} records ({} errors) for {} inputs from {} shard outputs, each input once{}: {}\n",
               plan.order.size(), errors, paths.size(), shards.size(), notes, out.name());
  }
  return kOk;
}

}  // namespace qvl::app
