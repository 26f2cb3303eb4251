// Reading back a JSON Lines file that a run of ours may have left unfinished
// (killed mid-write): `qvl ocr --resume` uses it to skip work already done.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
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

}  // namespace qvl
