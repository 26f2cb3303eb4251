#include "repl_input.h"

#include <histedit.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "common.h"

namespace qvl::app {

struct LineReader::Editor {
  EditLine* el = nullptr;
  History* history = nullptr;
  std::string prompt;
  std::string last_entry;

  ~Editor() {
    if (el) el_end(el);
    if (history) history_end(history);
  }
};

namespace {

// libedit asks for the prompt through a callback that only gets the EditLine;
// the Editor is reached through EL_CLIENTDATA.
const char* prompt_of(EditLine* el) {
  void* data = nullptr;
  el_get(el, EL_CLIENTDATA, &data);
  return static_cast<LineReader::Editor*>(data)->prompt.c_str();
}

// libedit needs a multibyte locale to edit non-ASCII text; keep the user's one,
// or fall back to C.UTF-8 when the environment says plain "C".
void use_utf8_ctype() {
  const char* got = std::setlocale(LC_CTYPE, "");
  if (!got || std::strcmp(got, "C") == 0 || std::strcmp(got, "POSIX") == 0) std::setlocale(LC_CTYPE, "C.UTF-8");
}

void strip_newline(std::string& s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
}

}  // namespace

bool stdin_is_terminal() { return ::isatty(STDIN_FILENO) == 1; }

LineReader::LineReader(bool interactive, std::string prompt) : interactive_(interactive), prompt_(std::move(prompt)) {
  if (!interactive_) return;
  use_utf8_ctype();
  editor_ = std::make_unique<Editor>();
  editor_->prompt = prompt_;
  editor_->history = history_init();
  HistEvent ev;
  history(editor_->history, &ev, H_SETSIZE, 1000);
  editor_->el = el_init("qvl", stdin, stderr, stderr);
  EditLine* el = editor_->el;
  el_set(el, EL_CLIENTDATA, editor_.get());
  el_set(el, EL_PROMPT, prompt_of);
  el_set(el, EL_EDITOR, "emacs");
  el_set(el, EL_HIST, history, editor_->history);
  el_source(el, nullptr);  // the user's ~/.editrc, as other libedit programs do
}

LineReader::~LineReader() = default;

LineReader::Status LineReader::read(std::string& line) {
  line.clear();
  if (!interactive_) {
    if (!std::getline(std::cin, line)) return Status::Eof;
    strip_newline(line);
    return Status::Line;
  }
  // Only while waiting at the prompt may Ctrl-C break the blocking read:
  // el_gets then returns with EINTR and we drop the half-typed line.
  clear_interrupt();
  install_interrupt_handler(/*interrupt_blocking_reads=*/true);
  int count = 0;
  const char* text = el_gets(editor_->el, &count);
  const int read_errno = errno;
  const bool got_interrupt = interrupted();
  install_interrupt_handler(/*interrupt_blocking_reads=*/false);
  clear_interrupt();
  if (!text) {
    if (got_interrupt || (count < 0 && read_errno == EINTR)) {
      std::fputs("^C\n", stderr);  // as shells show it; libedit's raw mode does not echo it
      return Status::Cancelled;
    }
    std::fputc('\n', stderr);  // Ctrl-D leaves the cursor after the prompt
    return Status::Eof;
  }
  line = text;
  strip_newline(line);
  if (!line.empty() && line != editor_->last_entry) {
    HistEvent ev;
    history(editor_->history, &ev, H_ENTER, line.c_str());
    editor_->last_entry = line;
  }
  return Status::Line;
}

}  // namespace qvl::app
