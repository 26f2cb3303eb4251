// One error type for the whole library: a one-line, user-facing message.
// Front ends print what() and exit non-zero; nothing below apps/ prints.
#pragma once
#include <stdexcept>
#include <string>

namespace qvl {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// The conversation plus the new turn would not fit in the KV cache. Front
// ends can offer to start over instead of failing.
class ContextFull : public Error {
 public:
  using Error::Error;
};

}  // namespace qvl
