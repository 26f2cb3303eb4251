// The prompt cache's decoder side (session/prompt_cache.h, Decoder::restore):
// a prefix's keys and values saved by one decoder and loaded into another give
// the same logits for the rest of the prompt, bit for bit, and the reference's;
// an entry for other tokens, another key or another dtype is a miss.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "golden_prompts.h"
#include "qvl/decoder/decoder.h"
#include "qvl/error.h"
#include "qvl/session/prompt_cache.h"
#include "test_support.h"

using namespace qvl;
using namespace qvl::test;

namespace {

struct Scratch {
  std::string path;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp && *tmp ? tmp : "/tmp") + "/qvl-prompt-cache-model-XXXXXX";
    REQUIRE(::mkdtemp(path.data()) != nullptr);
  }
  ~Scratch() { std::system(("rm -rf '" + path + "'").c_str()); }
};

Decoder make_decoder(at::ScalarType dtype) {
  DecoderOptions o;
  o.dtype = dtype;
  o.max_context = 256;
  return Decoder(tiny_checkpoint(), tiny_config(), o);
}

// Tokens [start, start + len) of a golden prompt with their deepstack rows.
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

std::vector<int32_t> prompt_ids(const std::string& name) {
  at::Tensor ids = golden(name + ".input_ids").to(at::kInt).contiguous();
  return std::vector<int32_t>(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + ids.numel());
}

}  // namespace

TEST_CASE("prompt cache: a saved prefix loaded into a fresh decoder gives the same logits for the rest") {
  Scratch s;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    CAPTURE(dtype);
    const Prompt p = load_prompt("system_image");
    const std::vector<int32_t> ids = prompt_ids("system_image");
    const int64_t L = p.length(), n = L - 5;  // the image and more in the prefix
    PromptPrefix prefix;
    prefix.key = std::string("test key ") + c10::toString(dtype);
    prefix.tokens.assign(ids.begin(), ids.begin() + n);
    prefix.next_position = p.positions.narrow(1, 0, n).max().item<int64_t>() + 1;
    const Prompt head = slice(p, 0, n), rest = slice(p, n, L - n);

    Decoder cold = make_decoder(dtype);
    cold.prefill(0, head.embeds, head.positions, head.deepstack_ptr());
    const at::Tensor cold_logits = cold.prefill(0, rest.embeds, rest.positions, rest.deepstack_ptr());
    std::vector<std::string> notes;
    PromptCache cache(s.path + "/pc", 64 << 20, [&](const std::string& note) { notes.push_back(note); });
    REQUIRE(cache.store(prefix, cold, 0));  // the rest's rows stay behind: only the prefix is saved

    Decoder warm = make_decoder(dtype);
    const std::optional<int64_t> next = cache.load(prefix, warm, 0);
    REQUIRE(next);
    CHECK(*next == prefix.next_position);
    CHECK(warm.cached() == n);
    const at::Tensor warm_logits = warm.prefill(0, rest.embeds, rest.positions, rest.deepstack_ptr());
    CHECK(at::equal(warm_logits, cold_logits));
    if (dtype == at::kFloat) CHECK(max_abs_diff(warm_logits, golden("system_image.logits_last")) <= 1e-3);
    CHECK(notes.empty());

    // Misses: other tokens under the same key, another key, a decoder of the other dtype.
    Decoder other = make_decoder(dtype);
    PromptPrefix changed = prefix;
    changed.tokens.back() += 1;
    CHECK_FALSE(cache.load(changed, other, 0));
    CHECK(notes.size() == 1);
    PromptPrefix unknown = prefix;
    unknown.key += " changed";
    CHECK_FALSE(cache.load(unknown, other, 0));
    CHECK(other.cached() == 0);
    Decoder other_dtype = make_decoder(dtype == at::kFloat ? at::kBFloat16 : at::kFloat);
    CHECK_FALSE(cache.load(prefix, other_dtype, 0));
    CHECK(other_dtype.cached() == 0);
  }
}

TEST_CASE("decoder restore: only into an empty sequence, only the right shapes") {
  Decoder dec = make_decoder(at::kFloat);
  const TextConfig& c = dec.config();
  std::vector<at::Tensor> kv(size_t(c.num_hidden_layers), at::zeros({c.num_key_value_heads, 3, c.head_dim}));
  dec.restore(0, kv, kv);
  CHECK(dec.cached() == 3);
  CHECK_THROWS_AS(dec.restore(0, kv, kv), Error);  // not empty
  dec.reset();
  std::vector<at::Tensor> bad = kv;
  bad[1] = at::zeros({c.num_key_value_heads, 4, c.head_dim});
  CHECK_THROWS_AS(dec.restore(0, kv, bad), Error);
  CHECK_THROWS_AS(dec.restore(0, std::vector<at::Tensor>(kv.begin(), kv.end() - 1), kv), Error);
  CHECK(dec.cached() == 0);
  std::vector<at::Tensor> too_long(size_t(c.num_hidden_layers), at::zeros({c.num_key_value_heads, 300, c.head_dim}));
  CHECK_THROWS_AS(dec.restore(0, too_long, too_long), Error);  // beyond max_context 256
  CHECK(dec.cached() == 0);
}
