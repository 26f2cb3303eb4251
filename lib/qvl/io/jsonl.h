// Reading back a JSON Lines file that a run of ours may have left unfinished
// (killed mid-write): `qvl ocr --resume` uses it to skip work already done.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qvl {

struct JsonlContents {
  std::vector<nlohmann::json> records;  // every complete line that holds a JSON object, in file order
  // Complete lines that are not a JSON object: typically the cut-off record of
  // a killed run that a resumed run then closed with its newline. Not an error.
  int64_t unreadable_lines = 0;
  // The text does not end with '\n': its last line was cut short and is
  // ignored. Whoever appends must start with a '\n'.
  bool partial_last_line = false;
};

JsonlContents parse_jsonl(const std::string& text);
// A missing file reads as empty; any other failure to read throws qvl::Error.
JsonlContents read_jsonl_file(const std::string& path);

// File names in records. A Linux file name is bytes, a JSON string is
// Unicode: a name that is valid UTF-8 is written as it is under `key`; any
// other name is written there readably (its invalid bytes as U+FFFD) and
// exactly, in base64, under `key` + "_b64" right after it. Reading prefers the
// exact field, so two names that differ only in invalid bytes stay apart.
void put_path(nlohmann::ordered_json& record, const std::string& key, const std::string& path);
// The exact bytes put_path wrote; nothing when `key` is absent or not a string,
// or its "_b64" field is not base64.
template <typename Json>
std::optional<std::string> get_path(const Json& record, const std::string& key);
// Removes `key` and `key` + "_b64".
void erase_path(nlohmann::ordered_json& record, const std::string& key);

std::string base64_encode(std::string_view bytes);
// Nothing when `text` is not padded standard base64.
std::optional<std::string> base64_decode(std::string_view text);

template <typename Json>
std::optional<std::string> get_path(const Json& record, const std::string& key) {
  const auto text = record.find(key);
  if (text == record.end() || !text->is_string()) return std::nullopt;
  const auto exact = record.find(key + "_b64");
  if (exact == record.end()) return text->template get<std::string>();
  if (!exact->is_string()) return std::nullopt;
  return base64_decode(exact->template get<std::string>());
}

}  // namespace qvl
