// OpenAI's `stop` strings over a streamed reply: the text up to the first
// stop string is sent, the stop string and what follows are not. Text that
// could be the start of a stop string is held back until the next piece
// shows whether it is.
#pragma once
#include <string>
#include <vector>

namespace qvl::serve {

class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);
  // Adds a piece of the reply; returns the text that can be sent now.
  std::string push(const std::string& piece);
  // A stop string was seen: the reply is over.
  bool stopped() const { return stopped_; }
  // At the end of the reply: the text held back (none once stopped).
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace qvl::serve
