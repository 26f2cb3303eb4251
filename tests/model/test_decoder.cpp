// The native text decoder against the reference goldens of the tiny checkpoint.
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qvl/decoder/decoder.h"
#include "qvl/decoder/kv_cache.h"
#include "qvl/decoder/layer.h"
#include "qvl/decoder/rope.h"
#include "qvl/decoder/torch_view.h"
#include "qvl/decoder/weights.h"
#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/model/config.h"
#include "qvl/tensor/linear.h"
#include "test_support.h"

#include "golden_prompts.h"
#include "temp_dir.h"

using namespace qvl;
using namespace qvl::test;

namespace {

// Tokens [start, start + len) of a prompt, with the deepstack rows that belong to them.
Prompt slice(const Prompt& p, int64_t start, int64_t len) {
  Prompt s;
  s.embeds = p.embeds.narrow(0, start, len);
  s.positions = p.positions.narrow(1, start, len);
  if (p.deepstack) {
    const at::Tensor& mask = p.deepstack->visual_mask;
    const int64_t before = mask.narrow(0, 0, start).to(at::kLong).sum().item<int64_t>();
    const int64_t inside = mask.narrow(0, start, len).to(at::kLong).sum().item<int64_t>();
    DeepstackInput ds;
    ds.visual_mask = mask.narrow(0, start, len);
    for (const at::Tensor& f : p.deepstack->features) ds.features.push_back(f.narrow(0, before, inside));
    s.deepstack = ds;
  }
  return s;
}

std::vector<int64_t> json_ids(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

std::vector<int32_t> prompt_ids(const std::string& name) {
  at::Tensor ids = golden(name + ".input_ids").to(at::kInt).contiguous();
  return std::vector<int32_t>(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
}

double max_abs(const at::Tensor& a) { return a.to(at::kFloat).abs().max().item<double>(); }

Decoder make_decoder(at::ScalarType dtype, bool lazy = true, int64_t max_context = 256, bool prefetch = true) {
  DecoderOptions o;
  o.dtype = dtype;
  o.lazy = lazy;
  o.max_context = max_context;
  o.prefetch = prefetch;
  return Decoder(tiny_checkpoint(), tiny_config(), o);
}

// CPU time of the whole process: with other work on the machine, a one-thread
// run's CPU time per step is a steadier figure than wall time.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("decoder f32: every hidden state and the last logits match the reference") {
  Decoder dec = make_decoder(at::kFloat);
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const Prompt p = load_prompt(name);
    dec.reset();
    ForwardTrace trace;
    at::Tensor logits = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr(), false, &trace);
    CHECK(dec.cached() == p.length());

    const at::Tensor ref = golden(name + ".hidden_states");
    REQUIRE(static_cast<int64_t>(trace.hidden_states.size()) == ref.size(0));
    for (int64_t k = 0; k < ref.size(0); ++k) {
      CAPTURE(k);
      CHECK(max_abs_diff(trace.hidden_states[k], ref[k]) <= 1e-4 * max_abs(ref[k]));
    }
    REQUIRE(logits.sizes() == at::IntArrayRef({tiny_config().vocab_size}));
    CHECK((logits.scalar_type() == at::kFloat));
    CHECK(max_abs_diff(logits, golden(name + ".logits_last")) <= 1e-3);
    CHECK(top1(logits) == model_case(name)["last_top5_ids"][0].get<int64_t>());
  }
}

TEST_CASE("decoder f32: all_logits gives the reference argmax at every position") {
  Decoder dec = make_decoder(at::kFloat);
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const Prompt p = load_prompt(name);
    dec.reset();
    at::Tensor logits = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr(), /*all_logits=*/true);
    REQUIRE(logits.sizes() == at::IntArrayRef({p.length(), tiny_config().vocab_size}));
    at::Tensor best = logits.argmax(1).contiguous();
    std::vector<int64_t> ours(best.data_ptr<int64_t>(), best.data_ptr<int64_t>() + best.numel());
    CHECK(ours == json_ids(model_case(name)["argmax_per_position"]));
    CHECK(max_abs_diff(logits[p.length() - 1], golden(name + ".logits_last")) <= 1e-3);
  }
}

TEST_CASE("decoder embed: token embeddings equal the reference inputs_embeds at text positions") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    Decoder dec = make_decoder(dtype);
    for (const std::string& name : kCases) {
      CAPTURE(name);
      const Prompt p = load_prompt(name);
      at::Tensor emb = dec.embed(prompt_ids(name));
      CHECK((emb.scalar_type() == dtype));
      REQUIRE(emb.sizes() == p.embeds.sizes());
      at::Tensor text = p.deepstack ? p.deepstack->visual_mask.logical_not() : at::ones({p.length()}, at::kBool);
      CHECK(text.sum().item<int64_t>() > 0);
      // The checkpoint is bf16, so its values are exact in float32 as well.
      CHECK(at::equal(emb.index({text}).to(at::kFloat), p.embeds.index({text})));
    }
    CHECK(error_of([&] { dec.embed({-1}); }).find("outside the vocabulary") != std::string::npos);
    CHECK(error_of([&] { dec.embed({static_cast<int32_t>(tiny_config().vocab_size)}); }) != "");
  }
}

TEST_CASE("decoder KV cache: prefill all but the last token, decode it alone, same logits") {
  Decoder dec = make_decoder(at::kFloat);
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const Prompt p = load_prompt(name);
    const int64_t L = p.length();
    dec.reset();
    const Prompt head = slice(p, 0, L - 1), last = slice(p, L - 1, 1);
    dec.prefill(0, head.embeds, head.positions, head.deepstack_ptr());
    CHECK(dec.cached() == L - 1);
    at::Tensor logits = dec.prefill(0, last.embeds, last.positions, last.deepstack_ptr());
    CHECK(dec.cached() == L);
    CHECK(max_abs_diff(logits, golden(name + ".logits_last")) <= 1e-3);

    // truncate() rewinds: the same last token again gives the same answer.
    dec.truncate(L - 1);
    CHECK(dec.cached() == L - 1);
    at::Tensor again = dec.prefill(0, last.embeds, last.positions, last.deepstack_ptr());
    CHECK(at::equal(again, logits));
  }
}

TEST_CASE("decoder KV cache: prefill in uneven chunks matches the reference") {
  Decoder dec = make_decoder(at::kFloat);
  const Prompt p = load_prompt("system_image");  // the image spans the chunk borders
  const int64_t L = p.length();
  at::Tensor logits;
  for (int64_t start = 0, len = 7; start < L; start += len, len = len * 2 + 3) {
    const Prompt part = slice(p, start, std::min(len, L - start));
    logits = dec.prefill(0, part.embeds, part.positions, part.deepstack_ptr());
  }
  CHECK(dec.cached() == L);
  CHECK(max_abs_diff(logits, golden("system_image.logits_last")) <= 1e-3);
}

// Prompts longer than the attention's query block (256) are attended block by
// block; the goldens are all shorter, so compare against prefilling in pieces.
TEST_CASE("decoder: a long prefill gives the same logits as the same prompt in short pieces") {
  const Prompt p = load_prompt("text_only");
  const int64_t L = 20 * p.length();  // 300 tokens
  at::Tensor embeds = p.embeds.repeat({20, 1});
  at::Tensor positions = at::arange(L, at::kLong).expand({3, L}).contiguous();
  Decoder whole = make_decoder(at::kFloat, true, 512), pieces = make_decoder(at::kFloat, true, 512);
  at::Tensor a = whole.prefill(0, embeds, positions, nullptr, /*all_logits=*/true);
  std::vector<at::Tensor> parts;
  for (int64_t start = 0; start < L; start += 90) {
    const int64_t n = std::min<int64_t>(90, L - start);
    parts.push_back(pieces.prefill(0, embeds.narrow(0, start, n), positions.narrow(1, start, n), nullptr, true));
  }
  at::Tensor b = at::cat(parts, 0);
  CHECK(max_abs_diff(a, b) <= 1e-4 * max_abs(b));
  CHECK(at::equal(a.argmax(1), b.argmax(1)));
}

TEST_CASE("decoder f32: greedy generation reproduces the reference tokens exactly") {
  Decoder dec = make_decoder(at::kFloat);
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const std::vector<int64_t> expected = json_ids(model_case(name)["greedy_16"]);
    CHECK(greedy(dec, load_prompt(name), 16) == expected);
  }
}

// Lockstep greedy decoding of several prompts, one sequence each: every
// decode() feeds the last token of each sequence still going.
std::vector<std::vector<int64_t>> greedy_batched(Decoder& dec, const std::vector<Prompt>& prompts, int max_new,
                                                 std::vector<at::Tensor>* first_logits = nullptr) {
  const int64_t n = int64_t(prompts.size());
  dec.set_sequences(n + 1);  // sequence 0 stays unused: the batch must not depend on it
  dec.reset();
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(n));
  std::vector<int64_t> next_position(static_cast<size_t>(n));
  std::vector<at::Tensor> logits(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const Prompt& p = prompts[size_t(i)];
    logits[size_t(i)] = dec.prefill(i + 1, p.embeds, p.positions, p.deepstack_ptr());
    next_position[size_t(i)] = p.positions.max().item<int64_t>() + 1;
  }
  if (first_logits) *first_logits = logits;
  for (int step = 0; step < max_new; ++step) {
    std::vector<int64_t> sequences, positions, rows;
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n; ++i) {
      auto& seq = out[size_t(i)];
      if (!seq.empty() && (std::find(kStopIds.begin(), kStopIds.end(), seq.back()) != kStopIds.end() ||
                           int(seq.size()) == max_new))
        continue;
      seq.push_back(top1(logits[size_t(i)]));
      if (std::find(kStopIds.begin(), kStopIds.end(), seq.back()) != kStopIds.end() || int(seq.size()) == max_new)
        continue;
      sequences.push_back(i + 1);
      tokens.push_back(int32_t(seq.back()));
      positions.push_back(next_position[size_t(i)] + step);
      rows.push_back(i);
    }
    if (sequences.empty()) break;
    at::Tensor batch_logits = dec.decode(sequences, tokens, positions);
    for (size_t r = 0; r < rows.size(); ++r) logits[size_t(rows[r])] = batch_logits[int64_t(r)];
  }
  return out;
}

TEST_CASE("decoder batched f32: all golden prompts decoded together reproduce each reference generation") {
  Decoder dec = make_decoder(at::kFloat);
  std::vector<Prompt> prompts;
  for (const std::string& name : kCases) prompts.push_back(load_prompt(name));
  const auto generated = greedy_batched(dec, prompts, 16);
  for (size_t i = 0; i < kCases.size(); ++i) {
    CAPTURE(kCases[i]);
    CHECK(generated[i] == json_ids(model_case(kCases[i])["greedy_16"]));
  }
  CHECK(dec.cached(0) == 0);
}

TEST_CASE("decoder batched bf16: a batch gives each sequence the logits it gets alone") {
  // Each row of a batched GEMV accumulates in the same order as a lone row,
  // and attention is per sequence, so batching changes no bit.
  Decoder dec = make_decoder(at::kBFloat16);
  std::vector<Prompt> prompts;
  for (const std::string& name : kCases) prompts.push_back(load_prompt(name));
  const auto batched = greedy_batched(dec, prompts, 8);
  for (size_t i = 0; i < kCases.size(); ++i) {
    CAPTURE(kCases[i]);
    CHECK(batched[i] == greedy(dec, prompts[i], 8));
  }
  // And the logits of a step, row by row, against one sequence stepped alone.
  dec.set_sequences(3);
  dec.reset();
  const Prompt& a = prompts[0];
  const Prompt& b = prompts[1];
  dec.prefill(1, a.embeds, a.positions);
  dec.prefill(2, b.embeds, b.positions, b.deepstack_ptr());
  const int64_t pa = a.positions.max().item<int64_t>() + 1, pb = b.positions.max().item<int64_t>() + 1;
  at::Tensor both = dec.decode({2, 1}, {785, 1207}, {pb, pa});
  dec.truncate(a.length(), 1);
  dec.truncate(b.length(), 2);
  at::Tensor alone_b = dec.decode({2}, {785}, {pb});
  at::Tensor alone_a = dec.decode({1}, {1207}, {pa});
  CHECK(at::equal(both[0], alone_b[0]));
  CHECK(at::equal(both[1], alone_a[0]));
}

TEST_CASE("decoder batched: bad steps are one-line errors that change no cache") {
  Decoder dec = make_decoder(at::kFloat, true, 12);
  dec.set_sequences(3);
  const Prompt p = load_prompt("text_only");
  dec.prefill(1, p.embeds.narrow(0, 0, 10), p.positions.narrow(1, 0, 10));
  CHECK(error_of([&] { dec.decode({1, 1}, {5, 6}, {10, 10}); }).find("twice") != std::string::npos);
  CHECK(error_of([&] { dec.decode({1, 7}, {5, 6}, {10, 0}); }).find("sequence 7 does not exist") != std::string::npos);
  CHECK(error_of([&] { dec.decode({1, 2}, {5}, {10, 0}); }).find("one token and one position") != std::string::npos);
  CHECK(dec.cached(1) == 10);
  CHECK(dec.cached(2) == 0);
  dec.prefill(2, p.embeds.narrow(0, 0, 12), p.positions.narrow(1, 0, 12));
  CHECK(error_of([&] { dec.decode({1, 2}, {5, 6}, {10, 12}); }).find("context full") != std::string::npos);
  CHECK(dec.cached(1) == 10);
  CHECK(dec.cached(2) == 12);
  dec.set_sequences(1);
  CHECK(error_of([&] { dec.cached(1); }).find("does not exist") != std::string::npos);
}

// The reference's own bf16 run differs from its float32 run by up to
// bf16_vs_fp32_last_maxabs (~0.02). Ours is another bf16 run with different
// rounding order, so by the triangle inequality it can sit up to about twice
// that from the reference bf16 logits; 2.5x leaves a little room.
TEST_CASE("decoder bf16: same top-1 as float32, logits within the reference's own bf16 error") {
  Decoder dec = make_decoder(at::kBFloat16);
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const Prompt p = load_prompt(name);
    dec.reset();
    at::Tensor logits = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
    const at::Tensor ref32 = golden(name + ".logits_last"), ref16 = golden(name + ".logits_last_bf16");
    const double reference_bf16_error = model_case(name)["bf16_vs_fp32_last_maxabs"].get<double>();
    const double vs_bf16 = max_abs_diff(logits, ref16), vs_f32 = max_abs_diff(logits, ref32);
    MESSAGE(name << ": |ours-ref_bf16| " << vs_bf16 << ", |ours-ref_f32| " << vs_f32 << ", reference bf16 error "
                 << reference_bf16_error);
    CHECK(top1(logits) == top1(ref32));
    CHECK(vs_bf16 <= 2.5 * reference_bf16_error);
    CHECK(vs_f32 <= 2.5 * reference_bf16_error);
  }
}

TEST_CASE("decoder bf16: the thread count may change between decode steps (the thread tuner does)") {
  // Every decode kernel gives each output to one thread, summed in one order,
  // so a step's logits do not depend on how many threads ran it.
  const int configured = at::get_num_threads(), many = std::max(2, configured);
  Decoder dec = make_decoder(at::kBFloat16);
  const Prompt p = load_prompt("one_image");
  const int64_t next = p.positions.max().item<int64_t>() + 1;
  auto steps = [&](const std::function<int(int)>& threads_at) {
    dec.reset();
    std::vector<at::Tensor> out = {dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr())};
    for (int s = 0; s < 8; ++s) {
      at::set_num_threads(threads_at(s));
      out.push_back(dec.decode({0}, {int32_t(top1(out.back()))}, {next + s})[0]);
    }
    at::set_num_threads(configured);
    return out;
  };
  const std::vector<at::Tensor> steady = steps([&](int) { return many; });
  const std::vector<at::Tensor> changing = steps([&](int s) { return s % 3 == 1 ? 1 : many; });
  for (size_t s = 0; s < steady.size(); ++s) {
    CAPTURE(s);
    CHECK(at::equal(steady[s], changing[s]));
  }
}

TEST_CASE("decoder lazy and eager loading give identical results") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    Decoder lazy = make_decoder(dtype, true);
    Decoder eager = make_decoder(dtype, false);
    Decoder unprefetched = make_decoder(dtype, true, 256, /*prefetch=*/false);
    CHECK(lazy.layers_loaded() == 0);
    CHECK(eager.layers_loaded() == tiny_config().num_hidden_layers);
    const Prompt p = load_prompt("one_image");
    ForwardTrace t_lazy, t_eager;
    at::Tensor a = lazy.prefill(0, p.embeds, p.positions, p.deepstack_ptr(), false, &t_lazy);
    at::Tensor b = eager.prefill(0, p.embeds, p.positions, p.deepstack_ptr(), false, &t_eager);
    at::Tensor c = unprefetched.prefill(0, p.embeds, p.positions, p.deepstack_ptr(), false, nullptr);
    CHECK(lazy.layers_loaded() == tiny_config().num_hidden_layers);
    CHECK(at::equal(a, b));
    CHECK(at::equal(a, c));
    REQUIRE(t_lazy.hidden_states.size() == t_eager.hidden_states.size());
    for (size_t k = 0; k < t_lazy.hidden_states.size(); ++k)
      CHECK(at::equal(t_lazy.hidden_states[k], t_eager.hidden_states[k]));
  }
}

TEST_CASE("decoder lazy prefetch: covers every text weight a forward pass reads, once; off when eager or asked") {
  const Checkpoint& ckpt = tiny_checkpoint();
  const TextConfig& cfg = tiny_config();
  // What a forward pass reads through the mapping, from the checkpoint's own
  // list: every text tensor that is not copied out of it (the small ones are
  // read from the file), the embedding table only as the tied lm_head
  // (lookups read rows).
  size_t expected = 0, copied = 0;
  for (const std::string& name : ckpt.names()) {
    const bool text = name.rfind("model.language_model.", 0) == 0 || name == "lm_head.weight";
    const bool embed = name == "model.language_model.embed_tokens.weight";
    if (!text || (embed && !cfg.tie_word_embeddings)) continue;
    if (tensor_is_copied(ckpt.get(name)))
      ++copied;
    else
      expected += ckpt.get(name).nbytes;
  }
  REQUIRE(expected > 0);
  REQUIRE(copied > 0);  // the tiny model has both kinds
  DecoderOptions o;
  o.dtype = at::kBFloat16;
  DecoderWeights lazy(ckpt, cfg, o);
  REQUIRE(lazy.prefetcher() != nullptr);
  lazy.prefetcher()->wait();
  CHECK(lazy.prefetcher()->error() == 0);
  CHECK(lazy.prefetcher()->bytes_done() == expected);
  CHECK(lazy.layers_loaded() == 0);  // pages only: no tensor is made ahead of its layer
  o.prefetch = false;
  CHECK(DecoderWeights(ckpt, cfg, o).prefetcher() == nullptr);
  o.prefetch = true;
  o.lazy = false;
  CHECK(DecoderWeights(ckpt, cfg, o).prefetcher() == nullptr);
}

TEST_CASE("decoder eager: a weight file truncated under the mapping is a one-line error, not SIGBUS") {
  // A copy of the tiny checkpoint, opened (mapped, headers checked), then cut
  // short: eager loading populates every text weight's pages first and must
  // report the hole instead of touching it.
  if (qvl::test::under_qemu_user_mode()) {
    MESSAGE("skipped under QEMU's user mode: it does not populate pages, so it reports no hole");
    return;
  }
  qvl_test::TempDir dir("qvl-decoder-truncated");
  for (const std::string& name : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                  "model-00002-of-00002.safetensors"}) {
    std::ifstream in(tiny_model_dir() + "/" + name, std::ios::binary);
    std::ofstream out(dir.path + "/" + name, std::ios::binary);
    out << in.rdbuf();
  }
  Checkpoint ckpt(dir.path);
  for (const char* shard : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
    REQUIRE(::truncate((dir.path + "/" + shard).c_str(), 4096) == 0);
  DecoderOptions o;
  o.dtype = at::kBFloat16;
  o.lazy = false;
  for (int threads : {1, 2}) {
    o.populate_threads = threads;
    const std::string err = error_of([&] { DecoderWeights w(ckpt, tiny_config(), o); });
    CHECK(err.find("cannot read the decoder weights") != std::string::npos);
    CHECK(err.find('\n') == std::string::npos);
  }
}

TEST_CASE("decoder: a context that outgrows its KV buffers gives the logits of one that never did") {
  // 990 tokens of max_context 1000: in pieces of 90 the buffers grow at 540 tokens (512 -> 1000 positions,
  // clamped to max_context), in one prefill they are made once.
  const Prompt p = load_prompt("text_only");
  const int64_t L = 990;
  at::Tensor embeds = p.embeds.repeat({L / p.length() + 1, 1}).narrow(0, 0, L);
  at::Tensor positions = at::arange(L, at::kLong).expand({3, L}).contiguous();
  Decoder whole = make_decoder(at::kFloat, true, 1000), pieces = make_decoder(at::kFloat, true, 1000);
  at::Tensor a = whole.prefill(0, embeds, positions);
  at::Tensor b;
  for (int64_t start = 0; start < L; start += 90)
    b = pieces.prefill(0, embeds.narrow(0, start, 90), positions.narrow(1, start, 90));
  CHECK(max_abs_diff(a, b) <= 1e-4 * max_abs(b));
  // The step after reads every position of the grown buffers.
  const int32_t next = int32_t(b.argmax().item<int64_t>());
  CHECK(next == int32_t(a.argmax().item<int64_t>()));
  at::Tensor da = whole.decode({0}, {next}, {L}), db = pieces.decode({0}, {next}, {L});
  CHECK(max_abs_diff(da, db) <= 1e-4 * max_abs(db));
}

TEST_CASE("KV cache: growing keeps every stored position, up to max_context and no further") {
  const int64_t layers = 3, heads = 2, dim = 4, max_context = 1300;
  KvCache cache(layers, heads, dim, max_context, at::kFloat);
  CHECK(cache.capacity() == 0);
  CHECK(cache.keys(0, 0).sizes().vec() == std::vector<int64_t>{heads, 0, dim});  // nothing allocated yet
  CHECK_THROWS_AS(cache.values(0, 1), Error);
  CHECK_THROWS_AS(cache.keys(layers, 0), Error);
  // Position p of layer l holds keys 1000 l + p (+ 0.5 for values) in every head and lane.
  auto rows = [&](int64_t layer, int64_t first, int64_t n, double extra) {
    return (at::arange(first, first + n, at::kFloat) + (1000.0 * double(layer) + extra))
        .view({1, n, 1})
        .expand({heads, n, dim})
        .contiguous();
  };
  auto append = [&](int64_t n) {
    const int64_t first = cache.size();
    for (int64_t l = 0; l < layers; ++l) cache.store(l, rows(l, first, n, 0), rows(l, first, n, 0.5));
    cache.commit(n);
  };
  append(300);
  CHECK(cache.capacity() == KvCache::kCapacityStep);
  append(300);  // needs 600: doubled to 1024
  CHECK(cache.capacity() == 2 * KvCache::kCapacityStep);
  cache.reserve(424);  // exactly full: no growth
  CHECK(cache.capacity() == 1024);
  for (int i = 0; i < 500; ++i) append(1);  // token by token past 1024: 2048 clamped to max_context
  CHECK(cache.capacity() == max_context);
  CHECK(cache.size() == 1100);
  for (int64_t l = 0; l < layers; ++l) {
    CHECK(at::equal(cache.keys(l, 1100), rows(l, 0, 1100, 0)));
    CHECK(at::equal(cache.values(l, 1100), rows(l, 0, 1100, 0.5)));
  }
  CHECK_THROWS_WITH_AS(cache.reserve(201), doctest::Contains("max_context 1300"), Error);
  CHECK_THROWS_AS(append(201), Error);
  CHECK(cache.size() == 1100);
  // Truncating and resetting keep the buffers (a REPL's next question reuses them).
  cache.truncate(10);
  append(5);
  CHECK(at::equal(cache.keys(2, 15).narrow(1, 0, 10), rows(2, 0, 10, 0)));
  CHECK(at::equal(cache.keys(2, 15).narrow(1, 10, 5), rows(2, 10, 5, 0)));
  cache.reset();
  CHECK(cache.size() == 0);
  CHECK(cache.capacity() == max_context);
}

TEST_CASE("decoder: exceeding max_context is an error that leaves the cache as it was") {
  const Prompt p = load_prompt("text_only");
  const int64_t L = p.length();
  Decoder dec = make_decoder(at::kFloat, true, L);
  dec.prefill(0, p.embeds, p.positions);
  CHECK(dec.cached() == L);
  const Prompt one = slice(p, 0, 1);
  std::string err = error_of([&] { dec.prefill(0, one.embeds, one.positions); });
  CHECK(err.find("max_context") != std::string::npos);
  CHECK(dec.cached() == L);

  Decoder small = make_decoder(at::kFloat, true, L - 1);
  CHECK(error_of([&] { small.prefill(0, p.embeds, p.positions); }).find("max_context") != std::string::npos);
  CHECK(small.cached() == 0);
  const Prompt head = slice(p, 0, L - 1);
  at::Tensor logits = small.prefill(0, head.embeds, head.positions);  // still usable
  CHECK(small.cached() == L - 1);
  CHECK(error_of([&] { small.truncate(L); }) != "");
}

TEST_CASE("decoder: bad inputs are one-line errors") {
  Decoder dec = make_decoder(at::kFloat);
  const Prompt p = load_prompt("one_image");
  const int64_t L = p.length();
  CHECK(error_of([&] { dec.prefill(0, at::zeros({L, 31}), p.positions); }).find("[L, 32]") != std::string::npos);
  CHECK(error_of([&] { dec.prefill(0, p.embeds, p.positions.narrow(1, 0, L - 1)); }).find("position ids") !=
        std::string::npos);
  DeepstackInput bad = *p.deepstack;
  bad.features[1] = bad.features[1].narrow(0, 0, 5);
  CHECK(error_of([&] { dec.prefill(0, p.embeds, p.positions, &bad); }).find("deepstack feature 1") !=
        std::string::npos);
  CHECK(dec.cached() == 0);
}

TEST_CASE("decoder: a checkpoint that does not fit the config names the tensor and both shapes") {
  TextConfig wide = tiny_config();
  wide.hidden_size = 64;
  DecoderOptions o;
  std::string err = error_of([&] { Decoder d(tiny_checkpoint(), wide, o); });
  CHECK(err.find("model.language_model.embed_tokens.weight") != std::string::npos);
  CHECK(err.find("[151936, 32]") != std::string::npos);
  CHECK(err.find("[151936, 64]") != std::string::npos);
  CHECK(err.find('\n') == std::string::npos);

  TextConfig deeper = tiny_config();
  deeper.num_hidden_layers = 5;
  CHECK(error_of([&] { Decoder d(tiny_checkpoint(), deeper, o); }).find("layers.4.") != std::string::npos);

  TextConfig untied = tiny_config();
  untied.tie_word_embeddings = false;
  CHECK(error_of([&] { Decoder d(tiny_checkpoint(), untied, o); }).find("lm_head.weight") != std::string::npos);
}

TEST_CASE("decoder rope: interleaved frequency-to-axis layout of Qwen3-VL") {
  TextConfig cfg = tiny_config();  // head_dim 128, sections [24, 20, 20], interleaved
  MultimodalRope rope(cfg);
  const std::vector<int64_t>& axis = rope.axis_of_frequency();
  REQUIRE(axis.size() == 64);
  std::vector<int64_t> counts(3, 0);
  for (int64_t a : axis) counts[a]++;
  CHECK(counts == std::vector<int64_t>({24, 20, 20}));
  CHECK(axis[0] == 0);
  CHECK(axis[1] == 1);
  CHECK(axis[2] == 2);
  CHECK(axis[58] == 1);
  CHECK(axis[59] == 2);
  CHECK(axis[60] == 0);
  CHECK(axis[63] == 0);
}

// Timings: run with  ./tests/qvl_model_tests -tc='*timing*' --no-skip
TEST_CASE("decoder timing: one decode step on the tiny model" * doctest::skip()) {
  for (int threads : {2, 1})
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    at::set_num_threads(threads);
    Decoder dec = make_decoder(dtype, false, 512);
    const Prompt p = load_prompt("one_image");
    at::Tensor logits = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
    const int steps = 100;
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = process_cpu_ms();
    for (int s = 0; s < steps; ++s) {
      logits = dec.decode({0}, {static_cast<int32_t>(top1(logits))}, {100 + s})[0];
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
    const double cpu_ms = (process_cpu_ms() - cpu0) / steps;
    MESSAGE("tiny model, " << std::string(c10::toString(dtype)) << ", " << threads << " threads: " << ms
                           << " ms per decode step (decode + argmax, context ~" << p.length()
                           << "; CPU time " << cpu_ms << " ms)");
  }
}

// The real 2B text shapes with random bf16 weights built in memory, driven
// through the same layer code Decoder::prefill and decode run. Needs ~4 GB of RAM.
TEST_CASE("decoder timing 2b: one decode step at Qwen3-VL-2B text shapes" * doctest::skip()) {
  at::set_num_threads(2);
  TextConfig cfg;  // defaults are the 2B shapes
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  auto random = [&](std::vector<int64_t> shape, double scale) { return (at::randn(shape) * scale).to(at::kBFloat16); };
  auto norm = [&](int64_t n) { return at::ones({n}, bf16); };
  const int64_t q_dim = cfg.num_attention_heads * cfg.head_dim, kv_dim = cfg.num_key_value_heads * cfg.head_dim;
  std::vector<LayerWeights> layers(cfg.num_hidden_layers);
  for (LayerWeights& w : layers) {
    w.input_norm = norm(cfg.hidden_size);
    w.post_attention_norm = norm(cfg.hidden_size);
    w.q_proj = random({q_dim, cfg.hidden_size}, 0.02);
    w.k_proj = random({kv_dim, cfg.hidden_size}, 0.02);
    w.v_proj = random({kv_dim, cfg.hidden_size}, 0.02);
    w.o_proj = random({cfg.hidden_size, q_dim}, 0.02);
    w.q_norm = norm(cfg.head_dim);
    w.k_norm = norm(cfg.head_dim);
    w.gate_proj = random({cfg.intermediate_size, cfg.hidden_size}, 0.02);
    w.up_proj = random({cfg.intermediate_size, cfg.hidden_size}, 0.02);
    w.down_proj = random({cfg.hidden_size, cfg.intermediate_size}, 0.02);
  }
  const at::Tensor embed = random({cfg.vocab_size, cfg.hidden_size}, 0.02);
  const at::Tensor final_norm = norm(cfg.hidden_size);
  MultimodalRope rope(cfg);
  KvCache cache(cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, 4096, at::kBFloat16);
  LayerWorkspace ws(cfg, at::kBFloat16);
  at::Tensor logits = at::empty({1, cfg.vocab_size}, bf16);

  auto step = [&](const at::Tensor& embeds) {
    const int64_t L = embeds.size(0);
    const RopeTables tables = rope.tables(at::arange(cache.size(), cache.size() + L, at::kLong).expand({3, L}));
    at::Tensor h = embeds;
    for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) h = run_decoder_layer(h, layers[i], cfg, tables, {{&cache, L}}, i, ws);
    cache.commit(L);
    tensor::linear_into(logits, rms_norm(h.narrow(0, L - 1, 1), final_norm, cfg.rms_norm_eps), embed);
    return logits.argmax().item<int64_t>();
  };
  auto ms_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  int64_t token = 0;
  for (int threads : {2, 1})
  for (int64_t prompt : {int64_t(100), int64_t(1000)}) {
    at::set_num_threads(threads);
    cache.reset();
    auto t0 = std::chrono::steady_clock::now();
    token = step(embed.index_select(0, at::arange(prompt, at::kLong)));
    const double prefill_ms = ms_since(t0);
    for (int s = 0; s < 3; ++s) token = step(embed.narrow(0, token, 1));  // warm up
    const int steps = 20;
    t0 = std::chrono::steady_clock::now();
    const double cpu0 = process_cpu_ms();
    for (int s = 0; s < steps; ++s) token = step(embed.narrow(0, token, 1));
    const double ms = ms_since(t0) / steps, cpu_ms = (process_cpu_ms() - cpu0) / steps;
    MESSAGE("2B text shapes, bf16, " << threads << " threads, prompt " << prompt << ": prefill " << prefill_ms
                                     << " ms (" << prompt * 1000.0 / prefill_ms << " tok/s); decode " << ms
                                     << " ms/token = " << 1000.0 / ms << " tok/s (CPU time " << cpu_ms << " ms/token)");
  }
}

TEST_CASE("checkpoint tensors: small ones are copies read from the file, big ones alias the mapping") {
  const Checkpoint& ckpt = tiny_checkpoint();
  const TensorView& norm = ckpt.get("model.language_model.layers.0.input_layernorm.weight");
  const TensorView& table = ckpt.get("model.language_model.embed_tokens.weight");
  REQUIRE(norm.nbytes < (size_t(1) << 20));
  REQUIRE(table.nbytes >= (size_t(1) << 20));
  const auto in_mapping = [](const at::Tensor& t, const TensorView& v) {
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    return p >= v.source->data() && p < v.source->data() + v.source->size();
  };
  const at::ScalarType norm_dtype = to_scalar_type(norm.dtype);
  const at::Tensor norm_bytes = at::from_blob(const_cast<uint8_t*>(norm.data), norm.shape, norm_dtype);
  const at::Tensor small = tensor_view(norm);
  CHECK(tensor_is_copied(norm));
  CHECK_FALSE(in_mapping(small, norm));
  CHECK(at::equal(small, norm_bytes));
  const at::Tensor big = tensor_view(table);
  CHECK_FALSE(tensor_is_copied(table));
  CHECK(big.data_ptr() == static_cast<const void*>(table.data));
}

TEST_CASE("quantized embedding lookups read the table's rows from the file: the same rows as the table") {
  const Checkpoint& ckpt = tiny_checkpoint();
  const TextConfig& cfg = tiny_config();
  qvl_test::TempDir cache("qvl-embed-rows");
  const std::vector<int32_t> ids = {0, 1, 9707, 151643, int32_t(cfg.vocab_size - 1), 9707};
  for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    DecoderOptions o;
    o.dtype = dtype;
    o.lazy = false;
    o.quant = WeightQuant::Int8;
    o.quant_cache_dir = cache.path;
    DecoderWeights quantized(ckpt, cfg, o);
    const at::Tensor rows = quantized.embedding_rows(ids);
    const at::Tensor table = tensor_view(ckpt.get("model.language_model.embed_tokens.weight"));
    const at::Tensor expected = table.index_select(0, at::tensor(ids, at::kInt).to(at::kLong)).to(dtype);
    CHECK((rows.scalar_type() == dtype));
    CHECK(at::equal(rows, expected));
  }
}
