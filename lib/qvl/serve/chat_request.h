// The body of an OpenAI chat completion request (POST /v1/chat/completions),
// checked field by field and turned into qvl's messages. Images arrive as
// data: URIs, or as file:// URLs under folders the server allows; nothing is
// fetched over the network.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "qvl/text/chat.h"

namespace qvl::serve {

// A request the client got wrong: the HTTP status and OpenAI's error fields.
class RequestError : public std::runtime_error {
 public:
  RequestError(const std::string& message, std::string param = "", std::string code = "", int status = 400)
      : std::runtime_error(message), param(std::move(param)), code(std::move(code)), status(status) {}
  std::string param;  // the offending field, "" when none
  std::string code;   // "" when none
  int status;
};

struct ImagePolicy {
  std::vector<std::string> allowed_dirs;  // file:// URLs must resolve inside one of these
  int64_t max_file_bytes = 256ll << 20;
};

struct ChatRequest {
  // Image parts name their image "image-<i>": images[i] holds its bytes.
  std::vector<Message> messages;
  std::vector<std::vector<uint8_t>> images;
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
};

// Throws RequestError for malformed JSON, a field of the wrong type or range,
// and images that are refused or cannot be read. Unknown fields are ignored.
ChatRequest parse_chat_request(const std::string& body, const ImagePolicy& policy);

// The bytes of a data: URI with base64 content; throws RequestError.
std::vector<uint8_t> data_uri_bytes(const std::string& uri);

// The file a file:// URL names, after resolving links, when it lies inside
// one of `allowed_dirs`; throws RequestError otherwise.
std::string allowed_file_path(const std::string& url, const std::vector<std::string>& allowed_dirs);

}  // namespace qvl::serve
