// Pieces shared by the subcommands that run the model.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "qvl/generate/sampler.h"
#include "qvl/session/session.h"

namespace qvl::app {

// Sampling flags; unset ones take generation_config.json's values.
struct SamplingFlags {
  bool greedy = false;
  std::optional<double> temperature, top_p, repetition_penalty, presence_penalty;
  std::optional<int64_t> top_k;
  uint64_t seed = 0;
  int64_t max_new_tokens = 512;
};
void add_sampling_options(CLI::App* cmd, SamplingFlags& flags);
SamplingOptions make_sampling(const SamplingFlags& flags, const GenerationConfig& defaults);

SessionOptions make_session_options(const ModelOptions& opts);
// How a Session made with these options will decode images (Session::
// decode_request(), image_limits()), for checking an image before it loads.
DecodeRequest decode_request_for(const SessionOptions& options);
ImageLimits image_limits_for(const SessionOptions& options);
// Sets the process's threads for a session with these options (session/threads.h):
// every command that loads the model calls it once, before the Session.
void configure_threads_for(const SessionOptions& options);

// Ctrl-C handling: the first SIGINT asks the current generation to stop; a
// second one ends the program the usual way. With interrupt_blocking_reads a
// SIGINT also makes a blocking read fail with EINTR (a REPL's prompt uses that
// to clear the line); otherwise interrupted system calls are restarted.
void install_interrupt_handler(bool interrupt_blocking_reads = false);
bool interrupted();
void clear_interrupt();

// Throws qvl::Error, before anything is tokenized, when the messages' text is
// so long that even at kMaxBytesPerToken bytes a token it cannot fit in
// max_context tokens.
void check_prompt_length(const std::vector<Message>& messages, int64_t max_context);

// For -v lines: " (N image tokens)", " (2 images: N + M image tokens)"; "" without images.
std::string image_tokens_note(const Answer& a, const ModelConfig& cfg);

// Reads all of stdin (for "-" arguments).
std::string read_stdin();
// `--image -`: the image file's bytes from stdin; throws qvl::Error when it is
// empty or larger than max_bytes (ImageLimits::max_file_bytes).
std::vector<uint8_t> read_stdin_image(int64_t max_bytes);

}  // namespace qvl::app
