// qvl chat: a REPL about one image. Each line is a question; follow-ups reuse
// the session's KV cache, so the image and earlier turns are never recomputed.
//
// Streams, the same on a terminal and in a script: stdout carries only answers
// (each ends with a newline); the prompt, banner, command output (/stats,
// /help, /save) and errors go to stderr.
#include <fmt/core.h>
#include <stdlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "common.h"
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/text/chat.h"
#include "prompt_cache_flags.h"
#include "repl_input.h"

namespace qvl::app {
namespace {

struct ChatFlags {
  ModelOptions model;
  SamplingFlags sampling;
  PromptCacheFlags prompt_cache;
  std::string image;
  std::string system;
};

constexpr const char* kHelp =
    "Type a question and press Enter; the answer streams below it. Commands:\n"
    "  /image PATH   new conversation about another image (sent with the next question)\n"
    "  /reset        new conversation about the same image\n"
    "  /save FILE    write the conversation as chat JSON for qvl ask --messages (/save! FILE overwrites)\n"
    "  /stats        turns, tokens in cache, vision encoder calls, last answer's speed, peak memory\n"
    "  /help         this text\n"
    "  /quit, /exit  leave (so does Ctrl-D)\n"
    "Ctrl-C stops an answer and, at the prompt, clears the line. Start a line with // to ask\n"
    "something that begins with /.\n";

std::string trim(const std::string& s) {
  const char* space = " \t\r\n";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

// A path as typed at the prompt: terminals quote dropped files, and users type ~.
std::string typed_path(std::string path) {
  if (path.size() >= 2 && (path.front() == '\'' || path.front() == '"') && path.back() == path.front())
    path = path.substr(1, path.size() - 2);
  if (path.rfind("~/", 0) == 0)
    if (const char* home = std::getenv("HOME"); home && *home) path = std::string(home) + path.substr(1);
  return path;
}

struct CheckedImage {
  std::string path;  // absolute, so a saved conversation works from any folder
  int64_t width = 0, height = 0;
};

// Decodes the image now, so a bad file is reported when it is named rather
// than at the next question. `stdin_bytes`: the image of `--image -`.
CheckedImage check_image(const std::string& path, const ImageLimits& limits, const DecodeRequest& request,
                         const std::vector<uint8_t>* stdin_bytes = nullptr) {
  if (stdin_bytes) {
    const RgbImage rgb = decode_image(stdin_bytes->data(), stdin_bytes->size(), "stdin", limits, request);
    return CheckedImage{"-", rgb.width, rgb.height};
  }
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (!resolved) throw Error(fmt::format("{}: no such file", path));
  CheckedImage image{resolved, 0, 0};
  std::free(resolved);
  RgbImage rgb = decode_image_file(image.path, limits, request);
  image.width = rgb.width;
  image.height = rgb.height;
  return image;
}

// Session::ask refuses a turn that does not fit with this wording; there is no
// dedicated error type to catch.
bool is_context_full(const Error& e) { return dynamic_cast<const ContextFull*>(&e) != nullptr; }

// The answers are the results: once stdout fails (a full disk, a closed
// pipe) the answer in progress stops and the REPL ends with exit 1.
int g_stdout_errno = 0;

void write_stdout(const std::string& text) {
  if (g_stdout_errno) return;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
    g_stdout_errno = errno ? errno : EIO;
}

void throw_if_stdout_failed() {
  if (g_stdout_errno) throw Error(fmt::format("cannot write the answer to stdout: {}", std::strerror(g_stdout_errno)));
}

class ChatRepl {
 public:
  ChatRepl(const ChatFlags& flags, Session& session, std::optional<CheckedImage> image)
      : flags_(flags),
        session_(session),
        sampling_(make_sampling(flags.sampling, session.generation_config())),
        image_(std::move(image)) {}

  // Handles one input line; false when the user asked to quit.
  bool handle(const std::string& raw_line) {
    const std::string line = trim(raw_line);
    if (line.empty()) return true;
    if (line.rfind("//", 0) == 0) {
      ask(line.substr(1));
      return true;
    }
    if (line[0] != '/') {
      ask(line);
      return true;
    }
    const size_t space = line.find_first_of(" \t");
    const std::string name = line.substr(0, space);
    const std::string argument = space == std::string::npos ? "" : trim(line.substr(space));
    if (name == "/quit" || name == "/exit") return false;
    if (name == "/help") {
      fmt::print(stderr, "{}", kHelp);
    } else if (name == "/reset") {
      reset();
      fmt::print(stderr, "new conversation{}\n", image_ ? " about " + image_->path : "");
    } else if (name == "/image") {
      change_image(argument);
    } else if (name == "/save" || name == "/save!") {
      save(argument, /*overwrite=*/name == "/save!");
    } else if (name == "/stats") {
      print_stats();
    } else {
      fmt::print(stderr, "unknown command {}: /help lists the commands (start with // to ask about a /)\n", name);
    }
    return true;
  }

  void print_banner(double load_s) const {
    if (flags_.model.quiet) return;
    fmt::print(stderr, "qvl chat: model loaded in {:.1f} s", load_s);
    if (image_) fmt::print(stderr, "; image {} ({}x{})", image_->path, image_->width, image_->height);
    fmt::print(stderr, "\n/help lists the commands; Ctrl-D quits.\n");
  }

 private:
  void ask(const std::string& question) {
    std::vector<Message> turn;
    if (history_.empty() && !flags_.system.empty())
      turn.push_back({"system", {{ContentPart::Kind::Text, flags_.system, ""}}});
    Message user{"user", {}};
    const bool with_image = image_ && !image_in_cache_;
    if (with_image) user.parts.push_back({ContentPart::Kind::Image, "", image_->path});
    user.parts.push_back({ContentPart::Kind::Text, question, ""});
    turn.push_back(std::move(user));

    clear_interrupt();  // a Ctrl-C typed before this question must not stop it
    bool streamed = false;
    Answer answer;
    try {
      answer = session_.ask(turn, sampling_, [&](const std::string& piece) {
        write_stdout(piece);
        streamed = true;
        return !interrupted() && !g_stdout_errno;
      });
    } catch (const Error& e) {
      if (streamed) write_stdout("\n");
      throw_if_stdout_failed();
      report_failed_turn(e);
      return;
    } catch (const std::exception& e) {
      // Not one of ours (e.g. from libtorch, mid-computation): the cache may
      // hold half a turn, so start over rather than continue on it.
      if (streamed) write_stdout("\n");
      std::string what = e.what();
      fmt::print(stderr, "error: {}\n", what.substr(0, what.find('\n')));
      reset();
      fmt::print(stderr, "the conversation was reset\n");
      return;
    }
    write_stdout("\n");
    throw_if_stdout_failed();
    clear_interrupt();

    history_.insert(history_.end(), turn.begin(), turn.end());
    history_.push_back({"assistant", {{ContentPart::Kind::Text, answer.text, ""}}});
    if (with_image) image_in_cache_ = true;
    if (answer.stop_reason == "interrupted") fmt::print(stderr, "(answer stopped)\n");
    if (answer.stop_reason == "context") print_context_full("the answer was cut");
    if (flags_.model.verbose && !flags_.model.quiet)
      fmt::print(stderr,
                 "image {:.3f} s{} | vision {:.2f} s | prefill {} tok {:.2f} s ({:.1f} tok/s) | "
                 "decode {} tok {:.2f} s ({:.2f} tok/s) | ttft {:.2f} s\n",
                 answer.timings.image_s, image_tokens_note(answer, session_.config()), answer.timings.vision_s,
                 answer.prompt_tokens, answer.timings.prefill_s, answer.prefill_tokens_per_s(), answer.tokens.size(),
                 answer.timings.decode_s, answer.decode_tokens_per_s(), answer.timings.ttft_s);
    last_answer_ = std::move(answer);
  }

  void report_failed_turn(const Error& e) {
    // With an empty cache /reset cannot help: the library's own advice applies.
    if (is_context_full(e) && session_.stats().cached_tokens > 0) print_context_full("the question does not fit");
    else fmt::print(stderr, "error: {}\n", e.what());
  }

  void print_context_full(const char* what) const {
    const SessionStats s = session_.stats();
    fmt::print(stderr, "context full ({} tokens, {} in use): {}; /reset to start over or raise --max-context\n",
               s.max_context, s.cached_tokens, what);
  }

  void reset() {
    session_.reset();
    history_.clear();
    image_in_cache_ = false;
  }

  void change_image(const std::string& argument) {
    if (argument.empty()) {
      fmt::print(stderr, "usage: /image PATH\n");
      return;
    }
    try {
      image_ = check_image(typed_path(argument), session_.image_limits(), session_.decode_request());
    } catch (const Error& e) {
      fmt::print(stderr, "error: {} (the conversation goes on as before)\n", e.what());
      return;
    }
    reset();
    fmt::print(stderr, "new conversation about {} ({}x{})\n", image_->path, image_->width, image_->height);
  }

  void save(const std::string& argument, bool overwrite) {
    if (argument.empty()) {
      fmt::print(stderr, "usage: /save FILE (or /save! FILE to overwrite)\n");
      return;
    }
    if (history_.empty()) {
      fmt::print(stderr, "nothing to save yet: ask a question first\n");
      return;
    }
    const std::string path = typed_path(argument);
    // "x": never replace an existing file unless asked to, even one created meanwhile.
    std::FILE* f = std::fopen(path.c_str(), overwrite ? "w" : "wx");
    if (!f) {
      if (!overwrite && errno == EEXIST)
        fmt::print(stderr, "{} exists: /save! {} overwrites it\n", path, argument);
      else
        fmt::print(stderr, "error: cannot write {}: {}\n", path, std::strerror(errno));
      return;
    }
    const std::string text = messages_to_json(history_).dump(2) + "\n";
    const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !written) {
      fmt::print(stderr, "error: cannot write {}: {}\n", path, std::strerror(errno));
      return;
    }
    fmt::print(stderr, "saved {} messages to {}\n", history_.size(), path);
  }

  // One "key: value" per line so scripts can grep them.
  void print_stats() const {
    const SessionStats s = session_.stats();
    fmt::print(stderr, "turns: {}\ncached_tokens: {}\nmax_context: {}\nvision_calls: {}\nimages_encoded: {}\n", s.turns,
               s.cached_tokens, s.max_context, s.vision_calls, s.images_encoded);
    if (last_answer_) {
      const Answer& a = *last_answer_;
      fmt::print(stderr,
                 "last_prompt_tokens: {}\nlast_generated_tokens: {}\nlast_prefill_tok_s: {:.1f}\n"
                 "last_decode_tok_s: {:.2f}\nlast_ttft_s: {:.3f}\nlast_stop_reason: {}\n",
                 a.prompt_tokens, a.tokens.size(), a.prefill_tokens_per_s(), a.decode_tokens_per_s(),
                 a.timings.ttft_s, a.stop_reason);
    }
    fmt::print(stderr, "peak_rss_mb: {}\n", s.peak_rss_mb);
  }

  const ChatFlags& flags_;
  Session& session_;
  SamplingOptions sampling_;
  std::optional<CheckedImage> image_;
  bool image_in_cache_ = false;   // the image went in with an earlier question of this conversation
  std::vector<Message> history_;  // every message of this conversation, answers included (/save)
  std::optional<Answer> last_answer_;
};

// `--image -` took stdin: the questions come from the terminal instead.
void read_questions_from_terminal() {
  if (!std::freopen("/dev/tty", "r", stdin))
    throw Error(fmt::format("--image - read the image from stdin, so the questions must come from a terminal, and "
                            "/dev/tty cannot be opened ({}): give the image as a file instead",
                            std::strerror(errno)));
}

int run_chat(const ChatFlags& flags) {
  SessionOptions options = make_session_options(flags.model);
  apply_prompt_cache_flags(flags.prompt_cache, options);  // the first turn of each conversation
  std::optional<CheckedImage> image;
  std::vector<uint8_t> stdin_image;
  if (flags.image == "-") {
    stdin_image = read_stdin_image(ImageLimits{}.max_file_bytes);
    read_questions_from_terminal();
  }
  // Fail before the model loads; decoded as the session will (page, DCT scale toward the resized size).
  if (!flags.image.empty())
    image = check_image(flags.image, image_limits_for(options), decode_request_for(options),
                        flags.image == "-" ? &stdin_image : nullptr);
  configure_threads_for(options);
  Session session(options);
  if (!stdin_image.empty()) session.provide_image("-", std::move(stdin_image));
  install_interrupt_handler();
  ChatRepl repl(flags, session, std::move(image));
  repl.print_banner(session.load_seconds());
  LineReader reader(stdin_is_terminal(), "> ");
  std::string line;
  for (;;) {
    const LineReader::Status status = reader.read(line);
    if (status == LineReader::Status::Eof) break;
    if (status == LineReader::Status::Line && !repl.handle(line)) break;
  }
  return kOk;
}

}  // namespace

void register_chat(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ChatFlags>();
  CLI::App* cmd = app.add_subcommand(
      "chat", "Chat about an image: each line of stdin is a question, answers stream to stdout (/help inside)");
  add_model_options(cmd, f->model);
  add_sampling_options(cmd, f->sampling);
  add_prompt_cache_options(cmd, f->prompt_cache);
  cmd->add_option("-i,--image", f->image,
                  "Image file (PNG, JPEG, WebP, TIFF, BMP, GIF, PDF) sent with the first question; - reads it from "
                  "stdin (the questions then come from the terminal)")
      ->check(existing_file_or_stdin());
  add_page_options(cmd, &f->model.page, &f->model.dpi, &f->model.page_timeout_s);
  cmd->add_option("--system", f->system, "System message starting every conversation");
  cmd->callback([f, &exit_code] { exit_code = run_chat(*f); });
}

}  // namespace qvl::app
