// qvl ask: one question (about zero or more images), answer streamed to stdout.
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "prompt_cache_flags.h"
#include "qvl/error.h"
#include "qvl/io/mapped_file.h"
#include "qvl/io/safetensors.h"
#include "qvl/io/safetensors_writer.h"
#include "qvl/text/chat.h"

namespace qvl::app {
namespace {

struct AskFlags {
  ModelOptions model;
  SamplingFlags sampling;
  PromptCacheFlags prompt_cache;
  std::vector<std::string> images;
  std::string messages_file;
  std::string system;
  std::string prompt;
  bool json = false;
  std::string dump_logits;  // debugging: first-step logits as safetensors
};

std::vector<Message> build_messages(const AskFlags& f) {
  if (!f.messages_file.empty()) {
    if (!f.images.empty() || !f.prompt.empty() || !f.system.empty())
      throw Error("--messages already holds the conversation: do not combine it with --image, --system or a prompt");
    return parse_messages_file(f.messages_file);
  }
  const bool image_from_stdin = std::count(f.images.begin(), f.images.end(), "-") > 0;
  if (std::count(f.images.begin(), f.images.end(), "-") > 1)
    throw CLI::ValidationError("--image -", "stdin holds one image: give '--image -' once");
  if (image_from_stdin && f.prompt == "-")
    throw CLI::ValidationError("--image -",
                               "the image comes from stdin, so the question cannot: give it as an argument");
  std::string prompt = f.prompt == "-" ? read_stdin() : f.prompt;
  if (prompt.empty() && f.images.empty()) throw Error("nothing to ask: give a PROMPT, '-' for stdin, --image or --messages");
  std::vector<Message> msgs;
  if (!f.system.empty()) msgs.push_back({"system", {{ContentPart::Kind::Text, f.system, ""}}});
  Message user{"user", {}};
  for (const auto& img : f.images) user.parts.push_back({ContentPart::Kind::Image, "", img});
  if (!prompt.empty()) user.parts.push_back({ContentPart::Kind::Text, prompt, ""});
  msgs.push_back(std::move(user));
  return msgs;
}

nlohmann::json answer_json(const Answer& a, const std::vector<std::string>& image_files, double load_s,
                           const SessionStats& stats) {
  nlohmann::json images = nlohmann::json::array();
  for (size_t i = 0; i < a.grids.size(); ++i)
    images.push_back({{"file", i < image_files.size() ? image_files[i] : ""},
                      {"width", a.image_sizes[i].first},
                      {"height", a.image_sizes[i].second},
                      {"grid_thw", {a.grids[i].t, a.grids[i].h, a.grids[i].w}}});
  return {{"text", a.text},
          {"tokens", a.tokens},
          {"prompt_tokens", a.prompt_tokens},
          {"generated_tokens", a.tokens.size()},
          {"stop_reason", a.stop_reason},
          {"images", images},
          {"vision_runs", stats.vision_calls},
          {"prompt_cache", {{"reused_tokens", a.reused_prompt_tokens}, {"stored", a.prompt_stored}}},
          {"timings",
           {{"load_s", load_s},
            {"image_s", a.timings.image_s},
            {"vision_s", a.timings.vision_s},
            {"prefill_s", a.timings.prefill_s},
            {"decode_s", a.timings.decode_s},
            {"ttft_s", a.timings.ttft_s},
            {"prompt_cache_s", a.timings.prompt_cache_s},
            {"prefill_tok_s", a.prefill_tokens_per_s()},
            {"decode_tok_s", a.decode_tokens_per_s()}}}};
}

int run_ask(const AskFlags& f) {
  std::vector<Message> messages = build_messages(f);
  // Refused before the model loads: a text that cannot fit, an image that is not a file.
  check_prompt_length(messages, f.model.max_context);
  std::vector<uint8_t> stdin_image;
  for (const std::string& path : image_paths(messages)) {
    if (path == "-" && f.messages_file.empty()) stdin_image = read_stdin_image(ImageLimits{}.max_file_bytes);
    else require_regular_file(path);
  }
  SessionOptions session_options = make_session_options(f.model);
  session_options.keep_first_logits = !f.dump_logits.empty();
  apply_prompt_cache_flags(f.prompt_cache, session_options);
  configure_threads_for(session_options);
  Session session(session_options);
  if (!stdin_image.empty()) session.provide_image("-", std::move(stdin_image));
  SamplingOptions sampling = make_sampling(f.sampling, session.generation_config());
  install_interrupt_handler();
  const bool stream = !f.json;
  int write_errno = 0;  // stdout failed: stop generating, then say so
  Answer a;
  try {
    a = session.ask(messages, sampling, [&](const std::string& piece) {
      if (stream && (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size() || std::fflush(stdout) != 0)) {
        write_errno = errno ? errno : EIO;
        return false;
      }
      return !interrupted();
    });
  } catch (const ContextFull& e) {
    // Fewer pixels cannot help a question without images.
    std::string what = e.what();
    const std::string pixels = ", lower --max-pixels";
    const size_t at = what.find(pixels);
    if (image_paths(messages).empty() && at != std::string::npos) what.erase(at, pixels.size());
    throw Error(what);
  }
  if (write_errno) throw Error(fmt::format("cannot write the answer to stdout: {}", std::strerror(write_errno)));
  if (!f.dump_logits.empty()) {
    const std::vector<int64_t> shape = {int64_t(a.first_logits.size())};
    write_safetensors(f.dump_logits, {{"logits", DType::F32, shape, a.first_logits.data()}});
  }
  if (f.json) {
    fmt::print("{}\n", answer_json(a, image_paths(messages), session.load_seconds(), session.stats()).dump());
  } else {
    std::fputc('\n', stdout);
  }
  std::fflush(stdout);
  if (f.model.verbose && !f.model.quiet)
    fmt::print(stderr,
               "load {:.2f} s | image {:.3f} s{} | vision {:.2f} s | prefill {} tok {:.2f} s ({:.1f} tok/s) | "
               "decode {} tok {:.2f} s ({:.2f} tok/s) | ttft {:.2f} s | peak RSS {} MB{}\n",
               session.load_seconds(), a.timings.image_s, image_tokens_note(a, session.config()), a.timings.vision_s,
               a.prompt_tokens - a.reused_prompt_tokens, a.timings.prefill_s, a.prefill_tokens_per_s(),
               a.tokens.size(), a.timings.decode_s, a.decode_tokens_per_s(), a.timings.ttft_s,
               session.stats().peak_rss_mb, prompt_cache_note(a, session.stats()));
  return a.stop_reason == "interrupted" ? kInterrupted : kOk;
}

}  // namespace

void register_ask(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<AskFlags>();
  CLI::App* cmd = app.add_subcommand("ask", "Ask one question, optionally about images; the answer streams to stdout");
  add_model_options(cmd, f->model);
  add_sampling_options(cmd, f->sampling);
  add_prompt_cache_options(cmd, f->prompt_cache);
  cmd->add_option("-i,--image", f->images,
                  "Image file (PNG, JPEG, WebP, TIFF, BMP, GIF, PDF), or - for stdin; repeat for several")
      ->allow_extra_args(false)  // `--image a.png "question"`: one path per --image
      ->check(existing_file_or_stdin());
  add_page_options(cmd, &f->model.page, &f->model.dpi, &f->model.page_timeout_s);
  cmd->add_option("--messages", f->messages_file, "Chat JSON (transformers shape); image paths relative to the file")
      ->check(CLI::ExistingFile);
  cmd->add_option("--system", f->system, "System message");
  cmd->add_flag("--json", f->json, "Print one JSON object (text, tokens, prompt_tokens, images, timings) instead of streaming");
  cmd->add_option("--dump-logits", f->dump_logits, "Write the first step's logits (F32) to a safetensors file")
      ->group("Debugging");
  cmd->add_option("prompt", f->prompt, "The question, or - to read it from stdin (not with --image -)");
  cmd->callback([f, &exit_code] { exit_code = run_ask(*f); });
}

}  // namespace qvl::app
