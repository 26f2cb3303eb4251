#include "qvl/text/chat.h"

#include <nlohmann/json.hpp>

#include "qvl/error.h"
#include "qvl/io/mapped_file.h"

namespace qvl {
namespace {

using nlohmann::json;

constexpr const char* kImagePad = "<|image_pad|>";
constexpr const char* kImageBlock = "<|vision_start|><|image_pad|><|vision_end|>";

bool is_absolute(const std::string& p) { return !p.empty() && p[0] == '/'; }

ContentPart parse_part(const json& item, const std::string& base_dir, size_t msg_index) {
  auto where = "message " + std::to_string(msg_index);
  if (!item.is_object()) throw Error(where + ": content items must be objects");
  std::string type = item.value("type", "");
  ContentPart part;
  // The template treats any item with an "image" or "image_url" key as an image.
  if (type == "image" || item.contains("image") || item.contains("image_url")) {
    const json* src = item.contains("image") ? &item["image"] : item.contains("image_url") ? &item["image_url"] : nullptr;
    if (src && src->is_object() && src->contains("url")) src = &(*src)["url"];
    if (!src || !src->is_string()) throw Error(where + ": image item needs an \"image\" path");
    std::string path = src->get<std::string>();
    if (path.rfind("file://", 0) == 0) path = path.substr(7);
    if (path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0 || path.rfind("data:", 0) == 0)
      throw Error(where + ": only local image files are supported, not '" + path.substr(0, 40) + "'");
    if (!base_dir.empty() && !is_absolute(path)) path = base_dir + "/" + path;
    part.kind = ContentPart::Kind::Image;
    part.image = path;
    return part;
  }
  if (type == "video" || item.contains("video")) throw Error(where + ": video input is not supported");
  if (item.contains("text")) {
    if (!item["text"].is_string()) throw Error(where + ": \"text\" must be a string");
    part.text = item["text"].get<std::string>();
    return part;
  }
  throw Error(where + ": content item has neither text nor image");
}

// Appends what the template writes for a content list: images as vision
// blocks (numbered with add_vision_id), text as is.
void render_parts(const Message& m, const ChatOptions& opt, int& image_count, std::string& out) {
  for (const auto& p : m.parts) {
    if (p.kind == ContentPart::Kind::Image) {
      ++image_count;
      if (opt.add_vision_id) out += "Picture " + std::to_string(image_count) + ": ";
      out += kImageBlock;
    } else {
      out += p.text;
    }
  }
}

void render_text_only(const Message& m, std::string& out) {
  for (const auto& p : m.parts)
    if (p.kind == ContentPart::Kind::Text) out += p.text;
}

}  // namespace

std::vector<Message> parse_messages(const json& messages, const std::string& base_dir) {
  if (!messages.is_array()) throw Error("messages must be a JSON array of {role, content} objects");
  std::vector<Message> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error("message " + std::to_string(i) + ": needs a \"role\" string");
    Message msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool")
      throw Error("message " + std::to_string(i) + ": unknown role '" + msg.role + "'");
    const json content = m.contains("content") ? m["content"] : json();
    if (content.is_string()) {
      msg.parts.push_back({ContentPart::Kind::Text, content.get<std::string>(), ""});
    } else if (content.is_array()) {
      for (const auto& item : content) msg.parts.push_back(parse_part(item, base_dir, i));
    } else if (!content.is_null()) {
      throw Error("message " + std::to_string(i) + ": content must be a string or a list");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

int64_t text_bytes(const std::vector<Message>& messages) {
  int64_t n = 0;
  for (const Message& m : messages)
    for (const ContentPart& p : m.parts) n += int64_t(p.text.size());
  return n;
}

std::vector<Message> parse_messages_file(const std::string& path) {
  json j = json::parse(read_text_file(path), nullptr, false);
  if (j.is_discarded()) throw Error(path + ": not valid JSON");
  if (j.is_array() && j.empty()) throw Error(path + ": holds no messages ([]): nothing to ask");
  std::string dir = ".";
  auto slash = path.rfind('/');
  if (slash != std::string::npos) dir = path.substr(0, slash == 0 ? 1 : slash);
  try {
    return parse_messages(j, dir);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

json messages_to_json(const std::vector<Message>& messages) {
  json out = json::array();
  for (const auto& m : messages) {
    bool plain = m.parts.size() == 1 && m.parts[0].kind == ContentPart::Kind::Text;
    json content;
    if (plain) {
      content = m.parts[0].text;
    } else {
      content = json::array();
      for (const auto& p : m.parts) {
        if (p.kind == ContentPart::Kind::Image) content.push_back({{"type", "image"}, {"image", p.image}});
        else content.push_back({{"type", "text"}, {"text", p.text}});
      }
    }
    out.push_back({{"role", m.role}, {"content", content}});
  }
  return out;
}

std::string render_chat(const std::vector<Message>& messages, const ChatOptions& opt) {
  std::string out;
  // Only a leading system message is rendered; the template skips others.
  if (!messages.empty() && messages[0].role == "system") {
    out += "<|im_start|>system\n";
    render_text_only(messages[0], out);
    out += "<|im_end|>\n";
  }
  int image_count = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "user") {
      out += "<|im_start|>user\n";
      render_parts(m, opt, image_count, out);
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      out += "<|im_start|>assistant\n";
      render_text_only(m, out);
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      // Consecutive tool messages share one user turn.
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      render_parts(m, opt, image_count, out);
      out += "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (opt.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string expand_image_pads(const std::string& prompt, const std::vector<int64_t>& tokens_per_image) {
  std::string out;
  const std::string pad = kImagePad;
  size_t pos = 0, image = 0;
  for (;;) {
    size_t next = prompt.find(pad, pos);
    if (next == std::string::npos) break;
    if (image >= tokens_per_image.size())
      throw Error("the prompt has more image placeholders than images (" + std::to_string(tokens_per_image.size()) + ")");
    out.append(prompt, pos, next - pos);
    out.reserve(out.size() + pad.size() * size_t(tokens_per_image[image]));
    for (int64_t k = 0; k < tokens_per_image[image]; ++k) out += pad;
    ++image;
    pos = next + pad.size();
  }
  out.append(prompt, pos, std::string::npos);
  if (image != tokens_per_image.size())
    throw Error("the prompt has " + std::to_string(image) + " image placeholders but " +
                std::to_string(tokens_per_image.size()) + " images were given");
  return out;
}

std::vector<std::string> image_paths(const std::vector<Message>& messages) {
  std::vector<std::string> out;
  for (const auto& m : messages)
    for (const auto& p : m.parts)
      if (p.kind == ContentPart::Kind::Image) out.push_back(p.image);
  return out;
}

}  // namespace qvl
