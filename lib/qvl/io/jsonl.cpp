#include "qvl/io/jsonl.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "qvl/io/mapped_file.h"
#include "qvl/text/unicode.h"

namespace qvl {

JsonlContents parse_jsonl(const std::string& text) {
  JsonlContents contents;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) {
      contents.partial_last_line = true;
      break;
    }
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are harmless
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object())
      contents.records.push_back(std::move(record));
    else
      contents.unreadable_lines += 1;
  }
  return contents;
}

JsonlContents read_jsonl_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return {};
  return parse_jsonl(read_text_file(path));
}

void put_path(nlohmann::ordered_json& record, const std::string& key, const std::string& path) {
  if (unicode::is_valid_utf8(path)) {
    record[key] = path;
    return;
  }
  record[key] = unicode::lossy_utf8(path);
  record[key + "_b64"] = base64_encode(path);
}

void erase_path(nlohmann::ordered_json& record, const std::string& key) {
  record.erase(key);
  record.erase(key + "_b64");
}

namespace {
const char kBase64Digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t j = 0; j < 3; ++j) group = group << 8 | (j < n ? uint8_t(bytes[i + j]) : 0u);
    for (size_t j = 0; j < 4; ++j) out += j <= n ? kBase64Digits[group >> (18 - 6 * j) & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t group = 0;
    for (size_t j = 0; j < 4; ++j) {
      const int v = j < 4 - padding ? base64_value(text[i + j]) : 0;
      if (v < 0) return std::nullopt;
      group = group << 6 | uint32_t(v);
    }
    for (size_t j = 0; j < 3 - padding; ++j) out += char(group >> (16 - 8 * j) & 0xff);
  }
  return out;
}

}  // namespace qvl
