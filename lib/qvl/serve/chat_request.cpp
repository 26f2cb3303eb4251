#include "qvl/serve/chat_request.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "qvl/image/decode.h"

namespace qvl::serve {
namespace {

using nlohmann::json;

// Standard base64 (RFC 4648), padding optional; nullopt on any other character.
std::optional<std::vector<uint8_t>> base64_bytes(const std::string& text, size_t from) {
  std::vector<uint8_t> out;
  out.reserve((text.size() - from) / 4 * 3 + 3);
  uint32_t bits = 0;
  int nbits = 0;
  size_t end = text.size();
  while (end > from && text[end - 1] == '=') --end;
  for (size_t i = from; i < end; ++i) {
    const char c = text[i];
    int v;
    if (c >= 'A' && c <= 'Z') v = c - 'A';
    else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
    else if (c >= '0' && c <= '9') v = c - '0' + 52;
    else if (c == '+') v = 62;
    else if (c == '/') v = 63;
    else return std::nullopt;
    bits = (bits << 6) | uint32_t(v);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(uint8_t(bits >> nbits));
    }
  }
  return out;
}

std::string percent_decoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(uint8_t(s[i + 1])) && std::isxdigit(uint8_t(s[i + 2]))) {
      out.push_back(char(std::strtol(s.substr(i + 1, 2).c_str(), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

const char* type_name(const json& j) { return j.type_name(); }

[[noreturn]] void wrong_type(const std::string& param, const std::string& wanted, const json& got) {
  throw RequestError("'" + param + "' must be " + wanted + ", not " + type_name(got), param, "invalid_type");
}

std::optional<int64_t> integer_field(const json& body, const std::string& key, int64_t lo, int64_t hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) wrong_type(key, "an integer", *it);
  const int64_t v = it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi)
    throw RequestError("'" + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), key,
                       "invalid_value");
  return v;
}

std::optional<double> number_field(const json& body, const std::string& key, double lo, double hi) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) wrong_type(key, "a number", *it);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    throw RequestError("'" + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), key,
                       "invalid_value");
  return v;
}

std::vector<uint8_t> image_bytes(const std::string& url, const ImagePolicy& policy, const std::string& param) {
  try {
    if (starts_with(url, "data:")) return data_uri_bytes(url);
    if (starts_with(url, "file://")) {
      ImageLimits limits;
      limits.max_file_bytes = policy.max_file_bytes;
      return read_image_bytes(allowed_file_path(url, policy.allowed_dirs), limits);
    }
  } catch (RequestError& e) {
    e.param = param;
    throw;
  } catch (const std::exception& e) {
    throw RequestError(e.what(), param, "invalid_image");
  }
  if (starts_with(url, "http://") || starts_with(url, "https://"))
    throw RequestError("image URLs are not fetched: send the image inline as a data: URI (data:image/png;base64,...)",
                       param, "unsupported_image_url");
  throw RequestError("an image_url must be a data: URI (or a file:// URL the server allows)", param,
                     "invalid_image_url");
}

// One message's content: a string, null (an assistant message without
// text), or a list of text and image_url parts.
std::vector<ContentPart> parse_content(const json& content, const std::string& param, const ImagePolicy& policy,
                                       std::vector<std::vector<uint8_t>>& images) {
  std::vector<ContentPart> parts;
  if (content.is_null()) return parts;
  if (content.is_string()) {
    parts.push_back({ContentPart::Kind::Text, content.get<std::string>(), ""});
    return parts;
  }
  if (!content.is_array()) wrong_type(param, "a string or a list of content parts", content);
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(where, "an object", part);
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) throw RequestError("'" + where + ".type' must be a string", where + ".type", "invalid_type");
    if (*type == "text") {
      const auto text = part.find("text");
      if (text == part.end() || !text->is_string()) throw RequestError("'" + where + ".text' must be a string", where + ".text", "invalid_type");
      parts.push_back({ContentPart::Kind::Text, text->get<std::string>(), ""});
    } else if (*type == "image_url") {
      const auto image_url = part.find("image_url");
      std::string url;
      if (image_url != part.end() && image_url->is_string()) {
        url = image_url->get<std::string>();
      } else if (image_url != part.end() && image_url->is_object() && image_url->contains("url") &&
                 (*image_url)["url"].is_string()) {
        url = (*image_url)["url"].get<std::string>();
      } else {
        throw RequestError("'" + where + ".image_url' must be an object with a string 'url'", where + ".image_url",
                           "invalid_type");
      }
      images.push_back(image_bytes(url, policy, where + ".image_url"));
      parts.push_back({ContentPart::Kind::Image, "", "image-" + std::to_string(images.size() - 1)});
    } else {
      throw RequestError("content parts of type '" + type->get<std::string>() + "' are not supported (text, image_url)",
                         where + ".type", "invalid_value");
    }
  }
  return parts;
}

}  // namespace

std::vector<uint8_t> data_uri_bytes(const std::string& uri) {
  const size_t comma = uri.find(',');
  if (comma == std::string::npos) throw RequestError("a data: URI needs a ',' before its data");
  const std::string header = uri.substr(0, comma);
  if (header.size() < 7 || header.compare(header.size() - 7, 7, ";base64") != 0)
    throw RequestError("a data: URI must hold base64 (data:image/png;base64,...)", "", "invalid_image_url");
  std::optional<std::vector<uint8_t>> bytes = base64_bytes(uri, comma + 1);
  if (!bytes) throw RequestError("the data: URI's base64 is malformed", "", "invalid_image_url");
  if (bytes->empty()) throw RequestError("the data: URI holds no bytes", "", "invalid_image_url");
  return *bytes;
}

std::string allowed_file_path(const std::string& url, const std::vector<std::string>& allowed_dirs) {
  std::string path = percent_decoded(url.substr(7));
  if (starts_with(path, "localhost/")) path = path.substr(9);
  if (allowed_dirs.empty())
    throw RequestError("file:// images are refused: the server allows none (qvl serve --allow-path DIR)", "",
                       "file_not_allowed");
  char resolved[PATH_MAX];
  if (path.empty() || path[0] != '/' || !realpath(path.c_str(), resolved))
    throw RequestError("file:// image not found or not allowed: " + path, "", "file_not_allowed");
  const std::string real = resolved;
  for (const std::string& dir : allowed_dirs) {
    char dir_resolved[PATH_MAX];
    if (!realpath(dir.c_str(), dir_resolved)) continue;
    std::string prefix = dir_resolved;
    if (prefix.back() != '/') prefix += '/';
    if (starts_with(real, prefix)) return real;
  }
  throw RequestError("file:// image not found or not allowed: " + path, "", "file_not_allowed");
}

ChatRequest parse_chat_request(const std::string& body, const ImagePolicy& policy) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw RequestError(std::string("the body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
  if (!j.is_object()) wrong_type("body", "a JSON object", j);
  ChatRequest r;
  const auto messages = j.find("messages");
  if (messages == j.end()) throw RequestError("'messages' is required", "messages", "missing_required_parameter");
  if (!messages->is_array()) wrong_type("messages", "a list", *messages);
  if (messages->empty()) throw RequestError("'messages' must not be empty", "messages", "invalid_value");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(where, "an object", m);
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw RequestError("'" + where + ".role' must be a string", where + ".role", "invalid_type");
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for it
    if (name != "system" && name != "user" && name != "assistant")
      throw RequestError("'" + where + ".role' must be system, user or assistant", where + ".role", "invalid_value");
    const auto content = m.find("content");
    if (content == m.end() && name != "assistant")
      throw RequestError("'" + where + ".content' is required", where + ".content", "missing_required_parameter");
    Message msg{name, {}};
    if (content != m.end()) msg.parts = parse_content(*content, where + ".content", policy, r.images);
    r.messages.push_back(std::move(msg));
  }
  if (r.messages.back().role == "assistant")
    throw RequestError("the last message must be the user's (or the system's)", "messages", "invalid_value");

  r.max_tokens = integer_field(j, "max_completion_tokens", 1, INT64_MAX);
  if (!r.max_tokens) r.max_tokens = integer_field(j, "max_tokens", 1, INT64_MAX);
  r.temperature = number_field(j, "temperature", 0, 2);
  r.top_p = number_field(j, "top_p", 0, 1);
  if (r.top_p && *r.top_p == 0) throw RequestError("'top_p' must be above 0", "top_p", "invalid_value");
  r.top_k = integer_field(j, "top_k", 0, INT64_MAX);
  if (const auto seed = integer_field(j, "seed", INT64_MIN, INT64_MAX)) r.seed = uint64_t(*seed);
  if (const auto n = integer_field(j, "n", 1, INT64_MAX); n && *n != 1)
    throw RequestError("only one choice per request is supported ('n' must be 1)", "n", "invalid_value");
  if (const auto stream = j.find("stream"); stream != j.end() && !stream->is_null()) {
    if (!stream->is_boolean()) wrong_type("stream", "a boolean", *stream);
    r.stream = stream->get<bool>();
  }
  if (const auto stop = j.find("stop"); stop != j.end() && !stop->is_null()) {
    if (stop->is_string()) {
      r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) wrong_type("stop", "a string or a list of strings", *stop);
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or a list of strings", *stop);
    }
    if (r.stop.size() > 16) throw RequestError("at most 16 stop strings", "stop", "invalid_value");
    r.stop.erase(std::remove(r.stop.begin(), r.stop.end(), std::string()), r.stop.end());
  }
  return r;
}

}  // namespace qvl::serve
