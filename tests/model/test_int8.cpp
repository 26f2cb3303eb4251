// Weight-only int8 decoding (--quant int8) on the tiny checkpoint: the same
// answers as bf16, and the cache of quantized weights made once, reused, and
// rebuilt when it cannot be trusted.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qvl/decoder/decoder.h"
#include "qvl/decoder/int8_weights.h"
#include "qvl/decoder/torch_view.h"
#include "qvl/error.h"
#include "qvl/io/safetensors.h"
#include "qvl/kernels/int8_cache.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/kernels/quant.h"
#include "qvl/model/config.h"
#include "qvl/tensor/dequant.h"
#include "qvl/tensor/linear.h"
#include "test_support.h"

#include "golden_prompts.h"

using namespace qvl;
using namespace qvl::test;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temp dir, removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("qvl_test_int8_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

struct Notes {
  std::vector<std::string> lines;
  NoteCallback callback() {
    return [this](const std::string& note) { lines.push_back(note); };
  }
};

Decoder make_decoder(WeightQuant quant, const std::string& cache_dir = "", Notes* notes = nullptr,
                     bool lazy = true) {
  DecoderOptions o;
  o.dtype = at::kBFloat16;
  o.lazy = lazy;
  o.max_context = 256;
  o.quant = quant;
  o.quant_cache_dir = cache_dir;
  if (notes) o.on_note = notes->callback();
  return Decoder(tiny_checkpoint(), tiny_config(), o);
}

// How many tokens agree before the first difference.
int leading_agreement(const std::vector<int64_t>& ours, const std::vector<int64_t>& reference) {
  size_t n = 0;
  while (n < ours.size() && n < reference.size() && ours[n] == reference[n]) ++n;
  return int(n);
}

// Modification time in nanoseconds, to tell a rewritten file from an untouched one.
int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string cache_path(const std::string& dir) {
  return int8_cache_path(dir, tiny_checkpoint().fingerprint(), kDefaultInt8GroupSize);
}

bool mentions(const std::vector<std::string>& notes, const std::string& word) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(word) != std::string::npos; });
}

}  // namespace

// How close int8 logits must be to bf16 ones. Group-128 int8 rounds each weight
// by up to max|w| / 254 of its group, about 4x bf16's own rounding (2^-9
// relative); bf16 rounding of the activations alone moved the reference's
// logits by bf16_vs_fp32_last_maxabs (~0.02). An error 4x that, plus the
// activation rounding int8 shares with bf16, stays under 5x.
constexpr double kInt8ErrorFactor = 5.0;

TEST_CASE("int8: same first token as bf16 on every golden case, logits within the int8 error bound") {
  TempDir dir("tokens");
  Decoder bf16 = make_decoder(WeightQuant::None);
  Decoder int8 = make_decoder(WeightQuant::Int8, dir.str());
  int agree = 0, agree_bf16 = 0, total = 0;
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const Prompt p = load_prompt(name);
    bf16.reset();
    int8.reset();
    const at::Tensor a = bf16.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
    const at::Tensor b = int8.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
    const double reference_bf16_error = model_case(name)["bf16_vs_fp32_last_maxabs"].get<double>();
    const double diff = max_abs_diff(a, b);
    CHECK(top1(b) == top1(a));
    CHECK(top1(b) == model_case(name)["greedy_16"][0].get<int64_t>());
    CHECK(diff <= kInt8ErrorFactor * reference_bf16_error);

    const std::vector<int64_t> expected = model_case(name)["greedy_16"].get<std::vector<int64_t>>();
    const int same = leading_agreement(greedy(int8, p, 16), expected);
    const int same_bf16 = leading_agreement(greedy(bf16, p, 16), expected);
    agree += same;
    agree_bf16 += same_bf16;
    total += int(expected.size());
    MESSAGE(name << ": |int8 - bf16| logits " << diff << " (reference bf16 error " << reference_bf16_error
                 << "); greedy_16 tokens equal to the reference's before the first difference: int8 " << same
                 << ", bf16 " << same_bf16 << " of " << expected.size());
  }
  MESSAGE("greedy_16 leading tokens equal to the reference's: int8 " << agree << ", bf16 " << agree_bf16 << " of "
                                                                       << total);
}

TEST_CASE("int8: a decode step (GEMV) continues a prefill (dequantized matmul) like one long prefill") {
  TempDir dir("steps");
  Decoder dec = make_decoder(WeightQuant::Int8, dir.str());
  int matmul_heads = 0;
  for (const std::string& name : kCases) {
    CAPTURE(name);
    const Prompt p = load_prompt(name);
    const int64_t L = p.embeds.size(0);
    if (L - 1 <= tensor::kInt8GemvMaxRows) continue;  // the head must really take the matmul path
    matmul_heads += 1;
    dec.reset();
    const at::Tensor whole = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
    dec.reset();
    std::optional<DeepstackInput> head_ds, last_ds;
    if (p.deepstack) {
      const at::Tensor& mask = p.deepstack->visual_mask;
      REQUIRE(!mask[L - 1].item<bool>());  // the last token is text
      head_ds = DeepstackInput{mask.narrow(0, 0, L - 1), p.deepstack->features};
    }
    dec.prefill(0, p.embeds.narrow(0, 0, L - 1), p.positions.narrow(1, 0, L - 1), head_ds ? &*head_ds : nullptr);
    const at::Tensor step = dec.prefill(0, p.embeds.narrow(0, L - 1, 1), p.positions.narrow(1, L - 1, 1));
    CHECK(top1(step) == top1(whole));
    CHECK(max_abs_diff(step, whole) <= kInt8ErrorFactor * model_case(name)["bf16_vs_fp32_last_maxabs"].get<double>());
  }
  CHECK(matmul_heads >= 3);
}

TEST_CASE("int8: a decode step of many sequences gives each the logits it gets alone") {
  // A prompt of 6+ rows takes the int8 GEMM where the tier has a fast one; a
  // step of 6+ sequences must not (tensor::Rows): its rows would round
  // differently from a sequence stepped alone.
  TempDir dir("batch");
  Decoder dec = make_decoder(WeightQuant::Int8, dir.str());
  const int64_t n = 2 * tensor::kInt8GemvMaxRowsBeforeGemm + 1;
  dec.set_sequences(n);
  std::vector<int64_t> sequences, positions;
  std::vector<int32_t> tokens;
  for (int64_t s = 0; s < n; ++s) {
    const Prompt p = load_prompt(kCases[size_t(s) % kCases.size()]);
    dec.prefill(s, p.embeds, p.positions, p.deepstack_ptr());
    sequences.push_back(s);
    positions.push_back(p.positions.max().item<int64_t>() + 1);
    tokens.push_back(int32_t(100 + 37 * s));
  }
  const at::Tensor together = dec.decode(sequences, tokens, positions);
  for (int64_t s = 0; s < n; ++s) {
    CAPTURE(s);
    dec.truncate(dec.cached(s) - 1, s);
    const at::Tensor alone = dec.decode({s}, {tokens[size_t(s)]}, {positions[size_t(s)]});
    CHECK(at::equal(together[s], alone[0]));
  }
}

TEST_CASE("int8: all_logits (prefill path for the lm_head) agrees with the last-token logits") {
  TempDir dir("all_logits");
  Decoder dec = make_decoder(WeightQuant::Int8, dir.str());
  const Prompt p = load_prompt("one_image");
  const at::Tensor all = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr(), /*all_logits=*/true);
  REQUIRE(all.sizes() == at::IntArrayRef({p.embeds.size(0), tiny_config().vocab_size}));
  dec.reset();
  const at::Tensor last = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
  CHECK(top1(all[p.embeds.size(0) - 1]) == top1(last));
  const at::Tensor best = all.argmax(1).contiguous();
  const std::vector<int64_t> ours(best.data_ptr<int64_t>(), best.data_ptr<int64_t>() + best.numel());
  const std::vector<int64_t> reference = model_case("one_image")["argmax_per_position"].get<std::vector<int64_t>>();
  int64_t same = 0;
  for (size_t i = 0; i < ours.size(); ++i) same += ours[i] == reference[i];
  MESSAGE("int8 argmax equals the reference's at " << same << " of " << ours.size() << " positions");
  CHECK(same * 10 >= int64_t(ours.size()) * 9);
}

TEST_CASE("int8 cache: made once, then reused without rebuilding") {
  TempDir dir("reuse");
  const std::string path = cache_path(dir.str());
  Notes first;
  at::Tensor a, b;
  const Prompt p = load_prompt("text_only");
  {
    Decoder dec = make_decoder(WeightQuant::Int8, dir.str(), &first);
    a = dec.prefill(0, p.embeds, p.positions).clone();
  }
  REQUIRE(fs::exists(path));
  CHECK(first.lines.size() == 2);  // "quantizing ..." and "... ready"
  CHECK(mentions(first.lines, path));
  const int64_t made = mtime_ns(path);
  // Nothing else is left in the folder (no temporaries).
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);

  Notes second;
  {
    Decoder dec = make_decoder(WeightQuant::Int8, dir.str(), &second);
    b = dec.prefill(0, p.embeds, p.positions);
  }
  CHECK(second.lines.empty());
  CHECK(mtime_ns(path) == made);
  CHECK(at::equal(a, b));

  // The cache holds every projection of every layer and the lm_head, in groups of 128.
  const kernels::Int8Cache cache(path);
  CHECK(cache.matrices().size() == size_t(7 * tiny_config().num_hidden_layers + 1));
  const kernels::Int8Matrix& head = cache.get("lm_head");
  CHECK(head.rows == tiny_config().vocab_size);
  CHECK(head.cols == tiny_config().hidden_size);
  CHECK(head.group_size == kDefaultInt8GroupSize);
  CHECK(cache.get("layers.3.down_proj").cols == tiny_config().intermediate_size);
}

TEST_CASE("int8 cache: a corrupt, truncated or stale file is rebuilt, not used") {
  TempDir dir("rebuild");
  const std::string path = cache_path(dir.str());
  const Prompt p = load_prompt("one_image");
  at::Tensor good;
  {
    Decoder dec = make_decoder(WeightQuant::Int8, dir.str());
    good = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr()).clone();
  }
  const auto good_size = fs::file_size(path);

  auto rebuilt_after = [&](const std::function<void()>& spoil) {
    spoil();
    Notes notes;
    Decoder dec = make_decoder(WeightQuant::Int8, dir.str(), &notes);
    const at::Tensor logits = dec.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
    CHECK(at::equal(logits, good));
    CHECK(fs::file_size(path) == good_size);
    CHECK(mentions(notes.lines, "rebuilding"));
    return notes.lines.empty() ? std::string() : notes.lines[0];
  };
  SUBCASE("truncated") {
    const std::string why = rebuilt_after([&] { fs::resize_file(path, good_size / 2); });
    CHECK(why.find("outside the file") != std::string::npos);
  }
  SUBCASE("empty") { rebuilt_after([&] { fs::resize_file(path, 0); }); }
  SUBCASE("garbage header") {
    const std::string why = rebuilt_after([&] {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.write("NOTQVL!!", 8);
    });
    CHECK(why.find("not a qvl int8 cache") != std::string::npos);
  }
  SUBCASE("made for other weights (stale tag)") {
    const std::string why = rebuilt_after([&] {
      const kernels::QuantizedMatrix m(4, 64, 64);
      kernels::write_int8_cache(path, "qvl decoder int8 v1; group 128; weights 0123456789abcdef",
                                {{"lm_head", m.view()}});
    });
    CHECK(why.find("0123456789abcdef") != std::string::npos);
  }
  SUBCASE("right tag, wrong contents") {
    const std::string tag = kernels::Int8Cache(path).tag();
    const std::string why = rebuilt_after([&] {
      const kernels::QuantizedMatrix m(4, 64, 128);
      kernels::write_int8_cache(path, tag, {{"lm_head", m.view()}});
    });
    CHECK(why.find("matrices") != std::string::npos);
  }
}

TEST_CASE("int8: lazy touches a layer when it first runs; eager loads all; both give the same logits") {
  TempDir dir("lazy");
  Decoder lazy = make_decoder(WeightQuant::Int8, dir.str(), nullptr, true);
  Decoder eager = make_decoder(WeightQuant::Int8, dir.str(), nullptr, false);
  CHECK(lazy.layers_loaded() == 0);
  CHECK(eager.layers_loaded() == tiny_config().num_hidden_layers);
  const Prompt p = load_prompt("system_image");
  const at::Tensor a = lazy.prefill(0, p.embeds, p.positions, p.deepstack_ptr());
  CHECK(lazy.layers_loaded() == tiny_config().num_hidden_layers);
  CHECK(at::equal(a, eager.prefill(0, p.embeds, p.positions, p.deepstack_ptr())));
}

TEST_CASE("int8: without a cache folder the weights are quantized in memory, with a note, to the same logits") {
  TempDir dir("in_memory");
  Notes notes;
  Decoder in_memory = make_decoder(WeightQuant::Int8, "", &notes);
  Decoder cached = make_decoder(WeightQuant::Int8, dir.str());
  CHECK(std::any_of(notes.lines.begin(), notes.lines.end(),
                    [](const std::string& line) { return line.find("in memory") != std::string::npos; }));
  const Prompt p = load_prompt("one_image");
  CHECK(at::equal(in_memory.prefill(0, p.embeds, p.positions, p.deepstack_ptr()),
                  cached.prefill(0, p.embeds, p.positions, p.deepstack_ptr())));
}

namespace {

// q · scale as float32 [rows, cols], straight from the matrix's fields.
at::Tensor dequantized_from_fields(const kernels::Int8Matrix& m) {
  at::Tensor out = at::empty({m.rows, m.cols}, at::kFloat);
  float* o = out.data_ptr<float>();
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t k = 0; k < m.cols; ++k)
      o[r * m.cols + k] = float(m.weights[r * m.padded_cols + k]) * m.scales[r * m.groups() + k / m.group_size];
  return out;
}

}  // namespace

TEST_CASE("int8 dequantize_rows_into: float is q · scale from the fields, bf16 is its rounding") {
  const at::Tensor w = (at::randn({70, 200}, at::TensorOptions().dtype(at::kFloat)) * 0.05).to(at::kBFloat16);
  const kernels::QuantizedMatrix q =
      kernels::quantize_int8({static_cast<const uint16_t*>(w.data_ptr()), 70, 200}, 128);
  const at::Tensor reference = dequantized_from_fields(q.view());

  at::Tensor f32 = at::empty({70, 200}, at::kFloat);
  tensor::dequantize_rows_into(q.view(), 0, f32);
  CHECK(at::equal(f32, reference));
  at::Tensor rows = at::empty({9, 200}, at::kBFloat16);
  tensor::dequantize_rows_into(q.view(), 61, rows);
  CHECK(at::equal(rows, reference.narrow(0, 61, 9).to(at::kBFloat16)));
  at::Tensor too_many = at::empty({10, 200}, at::kBFloat16);
  CHECK_THROWS_AS(tensor::dequantize_rows_into(q.view(), 61, too_many), Error);

  // Through linear_into: more than kInt8GemvMaxRows rows take the int8 GEMM
  // where the tier has one (x quantized too: exactly gemm_int8's result),
  // else the dequantized matmul; 3 rows the GEMV.
  const int64_t long_input = tensor::kInt8GemvMaxRows + 1;
  const at::Tensor x = at::randn({long_input, 200}, at::kFloat);
  at::Tensor out = at::empty({long_input, 70}, at::kFloat), scratch;
  tensor::linear_into(out, x, tensor::LinearWeight(q.view()), {}, scratch);
  if (kernels::gemm_int8_is_fast()) {
    at::Tensor direct = at::empty({long_input, 70}, at::kFloat);
    kernels::gemm_int8(q.view(), x.data_ptr(), kernels::Storage::F32, 200, long_input, direct.data_ptr(),
                       kernels::Storage::F32, 70);
    CHECK(at::equal(out, direct));
    CHECK(!scratch.defined());
    CHECK(at::allclose(out, at::mm(x, reference.t()), 0.02, 0.05));
    // A bias (bf16, as the vision tower's) goes into the GEMM: its float32
    // values added to the sums before their one rounding (gemm_int8's bias).
    const at::Tensor bias = at::randn({70}, at::kFloat).to(at::kBFloat16);
    at::Tensor biased = at::empty({long_input, 70}, at::kFloat);
    tensor::linear_into(biased, x, tensor::LinearWeight(q.view()), bias, scratch);
    CHECK(at::equal(biased, direct + bias.to(at::kFloat)));
    // One value short: refused, not read past its end.
    CHECK_THROWS_AS(tensor::linear_into(biased, x, tensor::LinearWeight(q.view()), bias.narrow(0, 0, 69), scratch),
                    Error);
  } else {
    CHECK(at::allclose(out, at::mm(x, reference.t()), 1e-5, 1e-5));
  }
  at::Tensor few = at::empty({3, 70}, at::kFloat);
  tensor::linear_into(few, x.narrow(0, 0, 3), tensor::LinearWeight(q.view()), {}, scratch);
  // The GEMV quantizes x per group too: close, not equal.
  CHECK(at::allclose(few, at::mm(x.narrow(0, 0, 3), reference.t()), 0.02, 0.05));
}

TEST_CASE("int8 linear_into: a matrix too big for one dequantized block is done in blocks") {
  const int64_t rows = 1100, cols = 16384;  // 18 Mi weights: more than one 16 Mi-element block
  const at::Tensor w = (at::randn({rows, cols}, at::kFloat) * 0.05).to(at::kBFloat16);
  const kernels::QuantizedMatrix q =
      kernels::quantize_int8({static_cast<const uint16_t*>(w.data_ptr()), rows, cols}, 128);
  const at::Tensor reference = dequantized_from_fields(q.view());
  const int64_t long_input = tensor::kInt8GemvMaxRows + 1;  // the dequantized matmul
  const at::Tensor x = at::randn({long_input, cols}, at::kFloat);
  at::Tensor out = at::empty({long_input, rows}, at::kFloat), scratch;
  tensor::linear_into(out, x, tensor::LinearWeight(q.view()), {}, scratch);
  if (kernels::gemm_int8_is_fast()) {
    // The int8 GEMM needs no dequantized block (and quantizes x: ~1% error).
    CHECK(!scratch.defined());
    const at::Tensor exact = at::mm(x, reference.t());
    CHECK((out - exact).norm().item<double>() <= 0.02 * exact.norm().item<double>());
  } else {
    CHECK(scratch.numel() < rows * cols);
    CHECK(at::allclose(out, at::mm(x, reference.t()), 1e-4, 1e-4));
  }
}
