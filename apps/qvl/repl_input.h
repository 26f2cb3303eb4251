// Where the chat REPL's lines come from: libedit (line editing, history) when
// stdin is a terminal, plain std::getline otherwise so the REPL can be scripted.
#pragma once
#include <memory>
#include <string>

namespace qvl::app {

class LineReader {
 public:
  enum class Status {
    Line,       // `line` holds the text, without its newline
    Cancelled,  // Ctrl-C at the prompt: the half-typed line was dropped
    Eof,        // Ctrl-D on an empty line, or the end of piped input
  };

  // `interactive` selects libedit; the prompt and the editing display go to
  // stderr so that stdout carries nothing but answers.
  LineReader(bool interactive, std::string prompt);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  Status read(std::string& line);
  bool interactive() const { return interactive_; }

  struct Editor;  // libedit state, defined in the .cpp to keep <histedit.h> out of here

 private:
  bool interactive_;
  std::string prompt_;
  std::unique_ptr<Editor> editor_;
};

bool stdin_is_terminal();

}  // namespace qvl::app
