#include "qvl/io/jsonl.h"

#include <sys/stat.h>

#include <cerrno>

#include "qvl/io/mapped_file.h"

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

}  // namespace qvl
