// A Session joins the pieces: chat prompt + images -> tokens and embeddings ->
// decoder -> sampled tokens, streamed as text. It keeps the conversation's KV
// cache, so a follow-up question only computes its own new tokens.
//
// No torch types appear here: front ends include this header cheaply.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qvl/generate/reply.h"  // TextCallback
#include "qvl/generate/sampler.h"
#include "qvl/image/decode.h"
#include "qvl/image/preprocess.h"
#include "qvl/model/config.h"
#include "qvl/model/grid.h"
#include "qvl/model/precision.h"
#include "qvl/text/chat.h"

namespace qvl {

struct SessionOptions {
  std::string model_dir;
  ComputeDtype dtype = ComputeDtype::BF16;
  bool lazy = true;            // lazy: weights are touched when a layer first runs
  int64_t max_context = 4096;
  int64_t max_memory_mb = 0;   // refuse what would not fit; 0: MemAvailable at start
  int threads = 0;             // for the memory estimate; configure_threads() (threads.h) sets them
  // Decode steps may run on fewer threads than configured while other work
  // keeps the cores busy and that is faster (generate/thread_tuner.h). bf16
  // only; front ends turn it off when the user chose a thread count.
  bool adapt_threads = true;
  int64_t min_pixels = 0;      // 0: preprocessor_config.json
  int64_t max_pixels = 0;
  int64_t max_image_tokens = 0;  // > 0: images resized to at most this many tokens (image/image_budget.h)
  int image_page = 1;            // the page of a PDF or multi-page TIFF image part that is read
  int pdf_dpi = 0;               // 0: kDefaultPdfDpi
  int64_t max_image_pixels = 50'000'000;  // refuse larger decoded images
  double page_timeout_s = 30;    // a PDF page that renders longer is an error (ImageLimits::page_timeout_s)
  WeightQuant quant = WeightQuant::None;  // Int8: decoder projections as int8, made once and cached
  std::string cache_dir;       // int8/int4 weight and tokenizer caches, prompt cache; "" = $QVL_CACHE_DIR, else default
  std::function<void(const std::string&)> on_note;  // one-line notes about one-time work (building caches)
  int64_t feature_cache_mb = 256;  // vision features of recent images kept in memory (0: off)
  bool keep_first_logits = false;  // copy the logits of the first generated token into Answer (debugging, dtype comparisons)
  // Prompt cache (session/prompt_cache.h): a new conversation whose prompt
  // starts with images and text seen before loads their keys and values from
  // disk. Off unless a front end turns it on (bench measures without it).
  bool prompt_cache = false;
  std::string prompt_cache_dir;         // "": <the model's cache folder>/prompts
  int64_t prompt_cache_max_mb = 1024;   // least recently used entries go beyond this
};

struct Timings {
  double load_s = 0;     // session construction
  double image_s = 0;    // decode + preprocess
  double vision_s = 0;   // vision encoder + projector
  double prefill_s = 0;
  double decode_s = 0;
  double ttft_s = 0;     // from ask() to the first generated token
  double prompt_cache_s = 0;  // loading the prompt's prefix from the prompt cache (hit or not)
};

struct Answer {
  std::string text;
  std::vector<int32_t> tokens;     // generated ids (without the final eos)
  int64_t prompt_tokens = 0;       // tokens this turn added before generating
  int64_t reused_prompt_tokens = 0;  // of those, loaded from the prompt cache instead of prefilled
  bool prompt_stored = false;      // this turn's prompt prefix was saved to the prompt cache
  std::vector<ImageGrid> grids;
  std::vector<std::pair<int64_t, int64_t>> image_sizes;  // (width, height) as decoded
  std::string stop_reason;         // eos | length | interrupted | context
  std::vector<float> first_logits; // only with SessionOptions::keep_first_logits
  Timings timings;
  double decode_tokens_per_s() const;
  double prefill_tokens_per_s() const;
};

struct SessionStats {
  int64_t cached_tokens = 0;
  int64_t max_context = 0;
  int64_t vision_calls = 0;        // times the vision encoder ran
  int64_t images_encoded = 0;
  int64_t prompt_cache_hits = 0;   // prompts whose prefix came from the prompt cache
  int64_t turns = 0;
  int64_t peak_rss_mb = 0;
  // Token-by-token generation so far (prompts excluded): tokens fed back to the
  // decoder and the wall time of those steps, sampling included.
  int64_t decoded_tokens = 0;
  double decode_s = 0;
  // Those steps by the threads they ran on; whether a thread tuner chooses
  // that count (SessionOptions::adapt_threads, in a bf16 session with more
  // than one thread), and what it did: steps it tried at another count,
  // times it changed the count.
  std::map<int, int64_t> decode_steps_by_threads;
  bool threads_adapt = false;
  int64_t thread_probes = 0;
  int64_t thread_switches = 0;
};

// One independent question for Session::ask_batch: a conversation of one turn.
struct BatchRequest {
  uint64_t tag = 0;                     // handed back with the result
  std::vector<Message> turn;
  std::vector<PatchifiedImage> images;  // preprocessed, one per image part of `turn`
  // A server's requests each bring their own: sampling (else the batch's),
  // the text as it is generated, and a flag asked before every token (true:
  // the reply ends there, "interrupted", and its sequence is free).
  std::optional<SamplingOptions> sampling;
  TextCallback on_text;
  std::function<bool()> cancelled;
};

// Where Session::serve_batch gets requests: unlike ask_batch's, a source can
// have none right now while more will come.
struct RequestSource {
  std::function<std::optional<BatchRequest>()> poll;  // a request ready now, else nullopt
  // Called while nothing runs: blocks until poll() has a request (true) or
  // none will ever come (false).
  std::function<bool()> wait;
};

struct BatchResult {
  uint64_t tag = 0;
  Answer answer;
  std::string error;  // set: this request failed (the others go on)
};

class Session {
 public:
  explicit Session(const SessionOptions& options);  // throws qvl::Error
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Adds `turn` (user messages, optionally a leading system message on the
  // first turn) to the conversation and generates the assistant's reply.
  Answer ask(const std::vector<Message>& turn, const SamplingOptions& sampling, const TextCallback& on_text = {});
  // The same with the images already decoded and preprocessed (e.g. on another
  // thread, with preprocessor_config()): images[i] stands for the i-th image
  // part of `turn`, whose path is not read. Answer::image_sizes stays empty and
  // timings.image_s zero: the caller did that work.
  Answer ask(const std::vector<Message>& turn, const std::vector<PatchifiedImage>& images,
             const SamplingOptions& sampling, const TextCallback& on_text = {});

  // Answers independent one-turn requests, up to `batch` at a time: each
  // prompt is prefilled on its own, then the sequences decode together, so
  // each weight read serves all of them. A finished sequence makes room for
  // the next request at once. next_request() supplies requests (nullopt: no
  // more, e.g. after an interrupt: the running ones still finish);
  // on_result() gets each answer, or the error of a request that could not
  // start, in order of completion. The conversation of ask() is untouched.
  void ask_batch(int64_t batch, const std::function<std::optional<BatchRequest>()>& next_request,
                 const SamplingOptions& sampling, const std::function<void(BatchResult)>& on_result);
  // ask_batch for a server: runs until the source has no more, taking new
  // requests between decode steps whenever a sequence is free. Each request
  // needs its own sampling. prefill_chunk > 0: a longer prompt is prefilled
  // that many tokens at a time, a part between two decode steps, so the
  // replies running meanwhile are held up by a part, not the whole prompt.
  void serve_batch(int64_t batch, const RequestSource& source, const std::function<void(BatchResult)>& on_result,
                   int64_t prefill_chunk = 0);

  void reset();  // forget the conversation (the model stays loaded)
  SessionStats stats() const;
  const ModelConfig& config() const;
  const GenerationConfig& generation_config() const;
  // preprocessor_config.json with SessionOptions::min_pixels/max_pixels/
  // max_image_tokens applied (a turn whose images do not fit the context gets
  // a smaller max_pixels for that turn only).
  const PreprocessorConfig& preprocessor_config() const;
  // How this session decodes an image part: its page and PDF resolution, and
  // the preprocessor's max_pixels as the target (JPEG DCT scaling); and the
  // decoded-pixel limit. For callers that decode images themselves.
  DecodeRequest decode_request() const;
  ImageLimits image_limits() const;
  // Image parts named `name` (e.g. "-" for `--image -`) are decoded from these
  // bytes instead of being read from a file.
  void provide_image(const std::string& name, std::vector<uint8_t> bytes);
  double load_seconds() const;
  // Tokens the prompt of a one-turn request (as ask_batch runs it) takes
  // besides its image tokens: what is left of the context for the images.
  int64_t request_text_tokens(const std::vector<Message>& turn) const;
  // Loads the vision encoder now instead of at the first image (for benchmarks).
  void warm_vision();

 private:
  // ask_batch and serve_batch: next_request(idle, done) gives the next request
  // to start (idle: no reply is running); nullopt with `done` set when none
  // will ever come, without it when there is none for now.
  void run_batch(int64_t batch, const std::function<std::optional<BatchRequest>(bool idle, bool& done)>& next_request,
                 const std::function<void(BatchResult)>& on_result, int64_t prefill_chunk);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Peak resident set size of this process so far, in MiB (from /proc).
int64_t peak_rss_mb();

}  // namespace qvl
