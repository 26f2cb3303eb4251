// Reads a tokenizer.json in one streaming pass. The vocab and the merges are
// nine tenths of the file; they go straight into flat lists instead of a JSON
// document, which keeps loading the 11 MB Qwen file well under a second.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace qvl {

struct TokenizerJson {
  nlohmann::json settings;  // the whole file except model.vocab and model.merges
  std::vector<std::pair<std::string, int64_t>> vocab;     // token as spelled in the file, id
  std::vector<std::pair<std::string, std::string>> merges;  // highest priority first
};

// `source` names the file in error messages (qvl::Error).
TokenizerJson read_tokenizer_json(const std::string& text, const std::string& source);

}  // namespace qvl
