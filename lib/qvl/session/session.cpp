// The Session: loading, one conversation's turns (ask), and the prompt and
// vision pieces ask_batch (session_batch.cpp) shares.
#include "qvl/session/session.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // NoGradGuard: ATen.h stopped bringing it in libtorch 2.x

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "qvl/decoder/decoder.h"
#include "qvl/decoder/quant_cache.h"  // quant_cache_dir
#include "qvl/error.h"
#include "qvl/image/decode.h"
#include "qvl/image/image_budget.h"
#include "qvl/image/preprocess.h"
#include "qvl/io/cache_dir.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/checkpoint_layout.h"
#include "qvl/model/memory_budget.h"
#include "qvl/model/mrope_positions.h"
#include "qvl/session/feature_cache.h"
#include "qvl/session/session_internal.h"
#include "qvl/text/tokenizer.h"
#include "qvl/vision/module_cache.h"
#include "qvl/vision/vision_encoder.h"

namespace qvl {
namespace {

at::ScalarType scalar_type_of(ComputeDtype dtype) { return dtype == ComputeDtype::F32 ? at::kFloat : at::kBFloat16; }

// The caches' folder: the option, else what model_cache_dir() chooses
// ($QVL_CACHE_DIR, beside the model, or ~/.cache/qvl).
VisionOptions cache_options(const SessionOptions& o, at::ScalarType dtype) {
  VisionOptions vo;
  vo.dtype = dtype;
  vo.cache_dir = o.cache_dir;
  // int8 and int4 both run the vision linears in int8 (vision_int8.h).
  vo.quant = o.quant;
  vo.on_note = o.on_note;
  return vo;
}

// tokenizer.json's parse, kept in the model's cache folder (text/tokenizer_cache.h);
// without a writable folder the tokenizer is parsed every time, as before.
Tokenizer load_tokenizer(const std::string& model_dir, const std::string& fingerprint, const std::string& cache_dir) {
  std::string folder;
  try {
    folder = model_cache_dir(model_dir, fingerprint, cache_dir);
  } catch (const Error&) {
  }
  return Tokenizer::load_from_model_dir(model_dir, folder);
}

DecoderOptions decoder_options(const SessionOptions& o, const Checkpoint& ckpt, at::ScalarType dtype) {
  DecoderOptions d{dtype, o.lazy, o.max_context};
  d.quant = o.quant;
  if (d.quant != WeightQuant::None) {
    // One folder per model holds everything derived from it (io/cache_dir.h).
    d.quant_cache_dir = quant_cache_dir(o.model_dir, ckpt.fingerprint(), o.cache_dir, o.on_note);
    d.on_note = o.on_note;
  }
  return d;
}

// A checkpoint that does not match config.json fails here, naming the tensor,
// before any weight is read.
Checkpoint open_checkpoint(const std::string& model_dir, const ModelConfig& cfg) {
  Checkpoint ckpt(model_dir);
  validate_checkpoint(ckpt, cfg);
  return ckpt;
}

// Positions as the decoder takes them: [3, L] int64.
at::Tensor positions_tensor(const MropePositions& pos) {
  const int64_t n = int64_t(pos.ids.size());
  at::Tensor t = at::empty({3, n}, at::kLong);
  auto a = t.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i)
    for (int axis = 0; axis < 3; ++axis) a[axis][i] = pos.ids[size_t(i)][size_t(axis)];
  return t;
}


}  // namespace

double Answer::decode_tokens_per_s() const {
  return timings.decode_s > 0 ? double(tokens.size() > 0 ? tokens.size() - 1 : 0) / timings.decode_s : 0.0;
}
double Answer::prefill_tokens_per_s() const {
  return timings.prefill_s > 0 ? double(prompt_tokens - reused_prompt_tokens) / timings.prefill_s : 0.0;
}

int64_t peak_rss_mb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  int64_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::atoll(line + 6);
  std::fclose(f);
  return kb / 1024;
}

Session::Impl::Impl(const SessionOptions& o, Clock::time_point t0)
    : options(o),
      config(load_model_config(o.model_dir)),
      preprocessor(load_preprocessor_config(o.model_dir)),
      generation(load_generation_config(o.model_dir)),
      checkpoint(open_checkpoint(o.model_dir, config)),
      tokenizer_load(std::async(std::launch::async,
                                [dir = o.model_dir, fingerprint = checkpoint.fingerprint(), cache = o.cache_dir] {
                                  return load_tokenizer(dir, fingerprint, cache);
                                })
                         .share()),
      budget(config, MemoryOptions{o.dtype, o.quant, o.max_context, o.threads}, o.max_memory_mb),
      dtype(scalar_type_of(o.dtype)),
      decoder(checkpoint, config.text, decoder_options(o, checkpoint, dtype)),
      feature_cache(o.feature_cache_mb << 20) {
  preprocessor = apply_image_bounds(preprocessor, {o.min_pixels, o.max_pixels, o.max_image_tokens});
  stats.max_context = o.max_context;
  load_s = seconds_since(t0);
}

VisionEncoder& Session::Impl::vision_encoder() {
  if (!vision) {
    vision = std::make_unique<VisionEncoder>(options.model_dir, config, checkpoint, cache_options(options, dtype));
  }
  return *vision;
}

Session::Session(const SessionOptions& options) {
  impl_ = std::make_unique<Impl>(options, Clock::now());
}

Session::~Session() = default;

const ModelConfig& Session::config() const { return impl_->config; }
const GenerationConfig& Session::generation_config() const { return impl_->generation; }
double Session::load_seconds() const { return impl_->load_s; }
void Session::warm_vision() { impl_->vision_encoder(); }

void Session::reset() {
  impl_->decoder.reset();
  impl_->conversation = {};
  impl_->pending.clear();
  impl_->assistant_turn_open = false;
  impl_->stats.turns = 0;
}

SessionStats Session::stats() const {
  SessionStats s = impl_->stats;
  s.cached_tokens = impl_->decoder.cached();
  s.decoded_tokens = impl_->generation_stats.decoded_tokens;
  s.decode_s = impl_->generation_stats.decode_s;
  s.decode_steps_by_threads = impl_->decode_steps_by_threads;
  s.threads_adapt = impl_->adapts_threads();
  if (impl_->thread_tuner) {
    s.thread_probes = impl_->thread_tuner->probes();
    s.thread_switches = impl_->thread_tuner->switches();
  }
  s.peak_rss_mb = peak_rss_mb();
  return s;
}

const PreprocessorConfig& Session::preprocessor_config() const { return impl_->preprocessor; }

DecodeRequest Session::Impl::decode_request() const {
  DecodeRequest request;
  request.page = options.image_page;
  request.target_max_pixels = preprocessor.max_pixels;  // the resize that follows goes at least this far
  request.pdf_dpi = options.pdf_dpi;
  return request;
}

ImageLimits Session::Impl::image_limits() const {
  ImageLimits limits;
  limits.max_pixels = options.max_image_pixels;
  limits.page_timeout_s = options.page_timeout_s;
  return limits;
}

DecodeRequest Session::decode_request() const { return impl_->decode_request(); }
ImageLimits Session::image_limits() const { return impl_->image_limits(); }

void Session::provide_image(const std::string& name, std::vector<uint8_t> bytes) {
  impl_->provided_images[name] = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
}

RgbImage Session::Impl::decode_image_part(const std::string& path) const {
  const ImageLimits limits = image_limits();
  const DecodeRequest request = decode_request();
  auto provided = provided_images.find(path);
  if (provided != provided_images.end())
    return decode_image(provided->second->data(), provided->second->size(), path == "-" ? "stdin" : path, limits,
                        request);
  return decode_image_file(path, limits, request);
}

int64_t Session::Impl::text_tokens(const std::vector<Message>& turn) {
  // Image pads are special tokens: the text around them tokenizes the same whatever their count.
  const size_t n_images = image_paths(turn).size();
  const std::string prefix = assistant_turn_open ? "<|im_end|>\n" : "";
  const std::string prompt = expand_image_pads(prefix + render_chat(turn), std::vector<int64_t>(n_images, 1));
  return int64_t(pending.size() + tokenizer().encode(prompt).size() - n_images);
}

int64_t Session::request_text_tokens(const std::vector<Message>& turn) const {
  const size_t n_images = image_paths(turn).size();
  const std::string prompt = expand_image_pads(render_chat(turn), std::vector<int64_t>(n_images, 1));
  return int64_t(impl_->tokenizer().encode(prompt).size() - n_images);
}

PreprocessorConfig Session::Impl::fit_to_context(const std::vector<Message>& turn,
                                                 const std::vector<std::pair<int64_t, int64_t>>& sizes,
                                                 int64_t max_new_tokens) {
  if (sizes.empty()) return preprocessor;
  int64_t wanted = 0;
  for (const auto& [width, height] : sizes) wanted += image_tokens_for(height, width, preprocessor);
  const int64_t room = options.max_context - decoder.cached();
  const int64_t text = text_tokens(turn);
  const int64_t available = room - 1 - text;  // the prompt plus the first generated token must fit
  if (wanted <= available) return preprocessor;
  // Shrunk anyway: leave the answer some room too, if the smallest size allows.
  const int64_t answer_room = std::min<int64_t>(max_new_tokens, 256);
  std::optional<int64_t> max_pixels = max_pixels_to_fit(sizes, preprocessor, available - answer_room);
  if (!max_pixels) max_pixels = max_pixels_to_fit(sizes, preprocessor, available);
  const std::string images = sizes.size() == 1 ? "the image" : fmt::format("the {} images", sizes.size());
  if (!max_pixels) {
    PreprocessorConfig smallest = preprocessor;
    smallest.max_pixels = smallest.min_pixels;
    int64_t least = 0;
    for (const auto& [width, height] : sizes) least += image_tokens_for(height, width, smallest);
    throw ContextFull(fmt::format("the prompt needs {} tokens even with {} at the smallest size (min_pixels {}), "
                                  "but only {} of the context limit ({}) are left; raise --max-context{}",
                                  text + least, images, preprocessor.min_pixels, room, options.max_context,
                                  decoder.cached() > 0 ? " or start a new conversation" : ""));
  }
  PreprocessorConfig fitted = preprocessor;
  fitted.max_pixels = *max_pixels;
  if (options.on_note) {
    int64_t got = 0;
    for (const auto& [width, height] : sizes) got += image_tokens_for(height, width, fitted);
    const int64_t ppt = pixels_per_image_token(fitted);
    options.on_note(fmt::format("{} need {} image tokens, but only {} of --max-context {} are left after the text: "
                                "shrunk to {} image tokens (at most {} each)",
                                images, wanted, available, options.max_context, got, fitted.max_pixels / ppt));
  }
  return fitted;
}

Answer Session::ask(const std::vector<Message>& turn, const SamplingOptions& sampling, const TextCallback& on_text) {
  // 1. Images: decode, fit to the context, preprocess (rejecting bad files before any model work).
  const auto t_image = Clock::now();
  std::vector<RgbImage> decoded;
  std::vector<std::pair<int64_t, int64_t>> sizes;
  for (const std::string& path : image_paths(turn)) {
    decoded.push_back(impl_->decode_image_part(path));
    sizes.emplace_back(decoded.back().width, decoded.back().height);
  }
  const PreprocessorConfig fitted = impl_->fit_to_context(turn, sizes, sampling.max_new_tokens);
  std::vector<ImageGrid> planned;
  for (const auto& [width, height] : sizes) planned.push_back(image_grid_for(height, width, fitted));
  impl_->budget.check_images(planned);  // before the pixels are resized and cut into patches
  std::vector<PatchifiedImage> images;
  for (RgbImage& rgb : decoded) {
    images.push_back(preprocess_image(rgb, fitted));
    rgb = RgbImage();
  }
  const double image_s = seconds_since(t_image);
  Answer answer = ask(turn, images, sampling, on_text);
  answer.image_sizes = std::move(sizes);
  answer.timings.image_s = image_s;
  answer.timings.ttft_s += image_s;  // the first token waited for the images too
  return answer;
}


void check_image_count(const std::vector<Message>& turn, const std::vector<PatchifiedImage>& images) {
  const size_t image_parts = image_paths(turn).size();
  if (images.size() != image_parts)
    throw Error("the turn has " + std::to_string(image_parts) + " image parts but " + std::to_string(images.size()) +
                " preprocessed images were given");
}

std::vector<int32_t> Session::Impl::prompt_ids(const std::vector<Message>& turn,
                                              const std::vector<PatchifiedImage>& images, const std::string& prefix,
                                              std::vector<int32_t> ids) {
  Impl& s = *this;
  std::vector<int64_t> pads;
  for (const auto& img : images) pads.push_back(img.grid.tokens(s.config.vision.spatial_merge_size));
  const std::string prompt = expand_image_pads(prefix + render_chat(turn), pads);
  for (auto id : s.tokenizer().encode(prompt)) ids.push_back(int32_t(id));
  return ids;
}

// Images seen recently come from the feature cache, the others are encoded
// together in one call.
std::optional<VisionFeatures> Session::Impl::image_features(const std::vector<PatchifiedImage>& images) {
  Impl& s = *this;
  if (images.empty()) return std::nullopt;
  std::vector<ImageFeatures> per_image(images.size());
  std::vector<std::string> keys;
  std::vector<size_t> missing;
  for (size_t i = 0; i < images.size(); ++i) {
    keys.push_back(FeatureCache::key_of(images[i]));
    if (const ImageFeatures* hit = s.feature_cache.find(keys.back())) per_image[i] = *hit;
    else missing.push_back(i);
  }
  if (!missing.empty()) {
    int64_t rows = 0;
    for (size_t i : missing) rows += images[i].grid.patches();
    at::Tensor pixels = at::empty({rows, images[missing[0]].patch_dim}, at::kFloat);
    float* dst = pixels.data_ptr<float>();
    std::vector<ImageGrid> grids;
    for (size_t i : missing) {
      std::memcpy(dst, images[i].pixel_values.data(), images[i].pixel_values.size() * sizeof(float));
      dst += images[i].pixel_values.size();
      grids.push_back(images[i].grid);
    }
    VisionFeatures encoded = s.vision_encoder().encode(pixels, grids);
    s.stats.vision_calls += 1;
    s.stats.images_encoded += int64_t(missing.size());
    int64_t row = 0;
    for (size_t i : missing) {
      const int64_t n = images[i].grid.tokens(s.config.vision.spatial_merge_size);
      per_image[i].embeds = encoded.embeds.narrow(0, row, n).clone();
      for (const auto& d : encoded.deepstack) per_image[i].deepstack.push_back(d.narrow(0, row, n).clone());
      row += n;
      s.feature_cache.put(keys[i], per_image[i]);
    }
  }
  VisionFeatures all;
  std::vector<at::Tensor> parts;
  for (const auto& f : per_image) parts.push_back(f.embeds);
  all.embeds = at::cat(parts, 0);
  for (size_t d = 0; d < per_image[0].deepstack.size(); ++d) {
    parts.clear();
    for (const auto& f : per_image) parts.push_back(f.deepstack[d]);
    all.deepstack.push_back(at::cat(parts, 0));
  }
  return all;
}

// Embeddings with image features scattered into the image-pad slots, and positions.
PromptInput Session::Impl::prompt_input(const std::vector<int32_t>& ids, const std::vector<ImageGrid>& grids,
                                        const std::optional<VisionFeatures>& features, int64_t first_position) {
  Impl& s = *this;
  PromptInput in;
  in.embeds = s.decoder.embed(ids);
  if (features) {
    std::vector<int64_t> ids64(ids.begin(), ids.end());
    at::Tensor mask = at::from_blob(ids64.data(), {int64_t(ids64.size())}, at::kLong).eq(s.config.image_token_id);
    const int64_t n_visual = mask.sum().item<int64_t>();
    if (n_visual != features->embeds.size(0))
      throw Error("image features (" + std::to_string(features->embeds.size(0)) + ") do not match image tokens (" +
                  std::to_string(n_visual) + ")");
    at::Tensor index = mask.nonzero().squeeze(1);
    in.embeds.index_copy_(0, index, features->embeds.to(in.embeds.scalar_type()));
    DeepstackInput ds;
    ds.visual_mask = mask;
    for (const auto& f : features->deepstack) ds.features.push_back(f.to(in.embeds.scalar_type()));
    in.deepstack = std::move(ds);
  }
  MropePositions pos =
      mrope_positions(ids, grids, s.config.vision.spatial_merge_size, int32_t(s.config.image_token_id), first_position);
  in.positions = positions_tensor(pos);
  in.next_position = pos.next;
  return in;
}

Answer Session::ask(const std::vector<Message>& turn, const std::vector<PatchifiedImage>& images,
                    const SamplingOptions& sampling, const TextCallback& on_text) {
  Impl& s = *impl_;
  at::NoGradGuard no_grad;
  const auto t_start = Clock::now();
  Answer answer;
  check_image_count(turn, images);
  for (const auto& img : images) answer.grids.push_back(img.grid);
  s.budget.check_images(answer.grids);

  // Prompt text for this turn, continuing the conversation if there is one.
  if (s.decoder.cached() > 0 && !turn.empty() && turn[0].role == "system")
    throw Error("a system message can only start a conversation");
  const std::vector<int32_t> ids =
      s.prompt_ids(turn, images, s.assistant_turn_open ? "<|im_end|>\n" : "", s.pending);
  answer.prompt_tokens = int64_t(ids.size());
  const int64_t room = s.options.max_context - s.decoder.cached();
  if (int64_t(ids.size()) + 1 > room)
    throw ContextFull("the prompt needs " + std::to_string(ids.size()) + " tokens but only " + std::to_string(room) +
                      " of the context limit (" + std::to_string(s.options.max_context) +
                      ") are left; raise --max-context, " + (images.empty() ? "" : "lower --max-pixels, ") +
                      "or start a new conversation");

  std::optional<PromptPrefix> to_store;
  const bool new_conversation = s.decoder.cached() == 0 && s.pending.empty();
  std::unique_ptr<Reply> reply =
      s.options.prompt_cache && new_conversation
          ? s.start_reply_with_prompt_cache(ids, images, answer, sampling, t_start, on_text, to_store)
          : s.start_reply(0, s.conversation, ids, images, answer, sampling, t_start, on_text);
  s.pending.clear();

  std::vector<std::unique_ptr<Reply>> running;
  running.push_back(std::move(reply));
  s.generate(std::move(running), {}, [&](std::unique_ptr<Reply> done) {
    // A token sampled but not fed is fed with the next turn, so the cache stays whole.
    if (done->last_unfed()) s.pending.push_back(*done->last_unfed());
    take_reply(*done, answer);
  });
  if (to_store) answer.prompt_stored = s.store_prompt_prefix(*to_store);  // after the answer: not in its time
  s.assistant_turn_open = true;
  s.stats.turns += 1;
  return answer;
}


}  // namespace qvl
