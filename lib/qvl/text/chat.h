// Qwen3-VL Instruct chat prompts. The model's chat_template.jinja is simple
// enough that rendering it by hand is exact (tests compare byte for byte with
// what transformers renders); no Jinja engine is needed.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace qvl {

struct ContentPart {
  enum class Kind { Text, Image };
  Kind kind = Kind::Text;
  std::string text;   // Kind::Text
  std::string image;  // Kind::Image: a path (resolved against the messages file's folder)
};

struct Message {
  std::string role;                 // system, user, assistant or tool
  std::vector<ContentPart> parts;   // a string content is one Text part
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool add_vision_id = false;  // "Picture N: " before each image
};

// Parses messages in the shape transformers takes:
// [{"role":"user","content":[{"type":"image","image":"a.jpg"},{"type":"text","text":"..."}]}]
// or content as a plain string. Relative image paths are resolved against base_dir
// (pass "" to keep them as they are). Throws qvl::Error on malformed input.
std::vector<Message> parse_messages(const nlohmann::json& messages, const std::string& base_dir = "");
std::vector<Message> parse_messages_file(const std::string& path);  // base_dir = the file's folder
nlohmann::json messages_to_json(const std::vector<Message>& messages);

// The prompt text, with one <|image_pad|> per image (see expand_image_pads).
std::string render_chat(const std::vector<Message>& messages, const ChatOptions& options = {});

// Replaces the i-th "<|image_pad|>" with tokens_per_image[i] copies of it, as
// the reference processor does; throws if the counts disagree.
std::string expand_image_pads(const std::string& prompt, const std::vector<int64_t>& tokens_per_image);

// All image paths in order of appearance.
std::vector<std::string> image_paths(const std::vector<Message>& messages);

// No token of a byte-level BPE vocab we run is longer than this (Qwen's
// longest is 128 bytes, a run of spaces; tests/unit/test_chat.cpp checks),
// so text of N bytes needs at least N / kMaxBytesPerToken tokens: a prompt
// far too long for the context is refused from its length, before the
// tokenizer spends seconds and gigabytes on it.
constexpr int64_t kMaxBytesPerToken = 256;
// Bytes of text in all the messages' text parts.
int64_t text_bytes(const std::vector<Message>& messages);

}  // namespace qvl
