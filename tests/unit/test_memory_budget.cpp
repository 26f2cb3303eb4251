// The memory estimate against figures worked out by hand from the two configs
// in tests/data (the tiny test model and the real 2B's shapes), and the
// refusals it leads to.
#include <doctest/doctest.h>

#include <string>

#include "qvl/error.h"
#include "qvl/model/config.h"
#include "qvl/model/memory_budget.h"
#include "test_support.h"

using namespace qvl;

namespace {

ModelConfig tiny_config() { return load_model_config(test::tiny_model_dir()); }
ModelConfig config_2b() { return load_model_config(test::data_path("qwen3-vl-2b")); }

MemoryOptions options(const std::string& dtype, const std::string& quant = "none", int64_t max_context = 4096) {
  MemoryOptions o;
  o.dtype = parse_compute_dtype(dtype);
  o.quant = parse_weight_quant(quant);
  o.max_context = max_context;
  o.threads = 1;
  return o;
}

constexpr int64_t kMiB = int64_t(1) << 20;

std::string refusal(const ModelConfig& cfg, const MemoryOptions& o, int64_t limit_mb) {
  try {
    MemoryBudget budget(cfg, o, limit_mb);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("memory estimate: the 2B model's weights and KV cache") {
  const ModelConfig cfg = config_2b();
  // Text: embeddings 151936 x 2048, then per layer two RMSNorms (2048), q and o
  // (2048 x 2048), k and v (1024 x 2048), q/k norms (128), gate/up/down
  // (6144 x 2048); the final norm. The output projection is tied.
  const int64_t per_layer = 2 * 2048 + 2 * 2048 * 2048 + 2 * 1024 * 2048 + 2 * 128 + 3 * 6144 * 2048;
  const int64_t text = 151936LL * 2048 + 28 * per_layer + 2048;
  CHECK(text == 1'720'574'976);
  // Vision: patch embedding (Conv3d 1024x3x2x16x16 + bias), position table
  // 2304 x 1024, 24 blocks, the merger and three deepstack mergers.
  const int64_t block = 2 * 2048 + (3072 * 1024 + 3072) + (1024 * 1024 + 1024) + (4096 * 1024 + 4096) +
                        (1024 * 4096 + 1024);
  const int64_t merger_fcs = (4096 * 4096 + 4096) + (2048 * 4096 + 2048);
  const int64_t vision = 1024 * 3 * 2 * 16 * 16 + 1024 + 2304 * 1024 + 24 * block + (2 * 1024 + merger_fcs) +
                         3 * (2 * 4096 + merger_fcs);
  // FIXTURES.md: the real checkpoint has 2.128 B parameters.
  CHECK(text + vision == 2'127'532'032);

  const MemoryEstimate bf16 = estimate_session_memory(cfg, options("bf16"));
  CHECK(bf16.text_weights == 2 * text);
  CHECK(bf16.vision_weights == 2 * vision);
  // 28 layers x (keys + values) x 8 heads x 4096 tokens x 128 x 2 bytes = 448 MiB.
  CHECK(bf16.kv_cache == 448 * kMiB);
  CHECK(bf16.images == 0);

  const MemoryEstimate f32 = estimate_session_memory(cfg, options("f32"));
  CHECK(f32.text_weights == 4 * text);
  CHECK(f32.vision_weights == 4 * vision);
  CHECK(f32.kv_cache == 896 * kMiB);
  CHECK(estimate_session_memory(cfg, options("bf16", "none", 1024)).kv_cache == 112 * kMiB);

  // int8: each projection is rows x cols bytes (2048 and 6144 are whole groups
  // of 128) plus a float scale per group; norms stay bf16; the tied lm_head
  // gets an int8 copy and the bf16 embedding table is only looked up.
  auto int8 = [](int64_t rows, int64_t cols) { return rows * cols + rows * (cols / 128) * 4; };
  const int64_t int8_layer = 2 * int8(2048, 2048) + 2 * int8(1024, 2048) + 2 * int8(6144, 2048) +
                             int8(2048, 6144) + 2 * (2 * 2048 + 2 * 128);
  const int64_t int8_text = 28 * int8_layer + 2 * 2048 + int8(151936, 2048);
  CHECK(estimate_session_memory(cfg, options("bf16", "int8")).text_weights == int8_text);
  CHECK(double(int8_text) / double(bf16.text_weights) == doctest::Approx(0.52).epsilon(0.02));
  // With f32 compute the embedding table is converted, so it counts in full.
  CHECK(estimate_session_memory(cfg, options("f32", "int8")).text_weights ==
        28 * (int8_layer + 2 * (2 * 2048 + 2 * 128)) + 4 * 2048 + int8(151936, 2048) + 4 * 151936LL * 2048);

  // int4: half a byte per weight plus two float16 (4 bytes) per group of 64.
  auto int4 = [](int64_t rows, int64_t cols) { return rows * cols / 2 + rows * (cols / 64) * 4; };
  const int64_t int4_layer = 2 * int4(2048, 2048) + 2 * int4(1024, 2048) + 2 * int4(6144, 2048) +
                             int4(2048, 6144) + 2 * (2 * 2048 + 2 * 128);
  const int64_t int4_text = 28 * int4_layer + 2 * 2048 + int4(151936, 2048);
  CHECK(estimate_session_memory(cfg, options("bf16", "int4")).text_weights == int4_text);
  CHECK(double(int4_text) / double(bf16.text_weights) == doctest::Approx(0.28).epsilon(0.03));

  // Vision under int8 and int4 alike: the 96 block linears and the 4 mergers'
  // first linears (4096 x 4096) in int8 (1024 and 4096 are whole groups), the
  // rest (the mergers' second linears included) still bf16.
  const int64_t block_linears = 3072 * 1024 + 1024 * 1024 + 4096 * 1024 + 1024 * 4096;
  const int64_t int8_vision = 2 * (vision - 24 * block_linears - 4 * 4096 * 4096) +
                              24 * (int8(3072, 1024) + int8(1024, 1024) + int8(4096, 1024) + int8(1024, 4096)) +
                              4 * int8(4096, 4096);
  CHECK(estimate_session_memory(cfg, options("bf16", "int8")).vision_weights == int8_vision);
  CHECK(estimate_session_memory(cfg, options("bf16", "int4")).vision_weights == int8_vision);
  CHECK(double(int8_vision) / double(bf16.vision_weights) == doctest::Approx(0.56).epsilon(0.03));
}

TEST_CASE("memory estimate: the tiny model") {
  const ModelConfig cfg = tiny_config();
  // hidden 32, 4 layers, 4 heads of 128 (q: 512), 2 kv heads (k, v: 256), MLP 96.
  const int64_t per_layer = 2 * 32 + 2 * 512 * 32 + 2 * 256 * 32 + 2 * 128 + 3 * 96 * 32;
  const int64_t text = 151936LL * 32 + 4 * per_layer + 32;
  const MemoryEstimate e = estimate_session_memory(cfg, options("bf16"));
  CHECK(e.text_weights == 2 * text);
  CHECK(e.text_weights == 10'193'472);
  CHECK(e.kv_cache == 4 * 2 * 2 * 4096 * 128 * 2);
  // int8 rows are padded to a whole group: 32 columns take 128 bytes and one scale.
  const MemoryEstimate q = estimate_session_memory(cfg, options("bf16", "int8"));
  // q, k, v, gate, up take 32 columns (one padded group per row); o takes 512
  // columns (4 groups), down 96 (one group).
  const int64_t layer = (512 + 256 + 256 + 96 + 96) * (128 + 4) + 32 * (512 + 4 * 4) + 32 * (128 + 4) +
                        2 * (2 * 32 + 2 * 128);
  CHECK(q.text_weights == 4 * layer + 2 * 32 + 151936LL * (128 + 4));
}

TEST_CASE("memory estimate: images grow with their patch count") {
  const ModelConfig cfg = tiny_config();
  const MemoryOptions o = options("bf16");
  CHECK(estimate_image_memory(cfg, o, {}) == 0);
  // An 8x8-patch image on the tiny model (64 patches, 16 tokens), worked out
  // term by term as memory_budget.cpp describes them:
  //   pixels   2 x 64 x 1536 x 4 bytes                                  786432
  //   tower    64 x (12 x 64 + 3 taps x 64) x 2                          122880
  //   scores   1 thread x 64 x 64 x 4                                     16384
  //   features (1 + 3) x 16 x 32 x 2                                       4096
  //   prefill  16 x (2x512 + 2x256 + 2x32 + 2x96) x 2 = 57344, hidden states
  //            4 x 16 x 32 x 4 = 8192, scores 4 heads x 16 x 4096 x 10 = 2621440
  // pixels + features + the largest of (tower + scores, mergers, prefill).
  CHECK(estimate_image_memory(cfg, o, {ImageGrid{1, 8, 8}}) == 786432 + 4096 + 57344 + 8192 + 2621440);
  const int64_t one = estimate_image_memory(cfg, o, {ImageGrid{1, 32, 32}});
  const int64_t two = estimate_image_memory(cfg, o, {ImageGrid{1, 32, 32}, ImageGrid{1, 32, 32}});
  CHECK(two > one);
  CHECK(estimate_image_memory(cfg, options("f32"), {ImageGrid{1, 32, 32}}) > one);

  // On the 2B model a 16-megapixel image (65536 patches) needs gigabytes:
  // 2 x 65536 x 1536 x 4 bytes of pixels alone are 768 MiB, and the tower's
  // 15 rows of 1024 bf16 values per patch are 1.875 GiB.
  const int64_t huge = estimate_image_memory(config_2b(), o, {ImageGrid{1, 256, 256}});
  CHECK(huge > 768 * kMiB + 1920 * kMiB);
  CHECK(huge < 4 * 1024 * kMiB);
}

TEST_CASE("memory budget: refuses with one line saying what needs the memory and what to change") {
  const ModelConfig cfg = config_2b();
  const std::string f32 = refusal(cfg, options("f32"), 4096);
  CHECK(f32.find("needs about 9.") != std::string::npos);  // 6.4 + 1.5 GiB weights, 0.9 KV, 0.3 runtime
  CHECK(f32.find("f32 weights 7.9 GB") != std::string::npos);
  CHECK(f32.find("KV cache 896 MB") != std::string::npos);
  CHECK(f32.find("--max-memory is 4096 MB") != std::string::npos);
  CHECK(f32.find("use --dtype bf16") != std::string::npos);
  CHECK(f32.find('\n') == std::string::npos);

  CHECK(refusal(cfg, options("bf16"), 6000) == "(accepted)");
  // A long context's KV cache is what to cut.
  CHECK(refusal(cfg, options("bf16", "int8", 65536), 6000).find("a smaller --max-context") != std::string::npos);

  // Images are checked against what is left, before any work on them.
  MemoryBudget budget(cfg, options("bf16"), 6000);
  CHECK_NOTHROW(budget.check_images({ImageGrid{1, 32, 32}}));
  try {
    budget.check_images({ImageGrid{1, 256, 256}});
    FAIL("a 16-megapixel image fitted in 6000 MB with the bf16 2B model");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("+ images ") != std::string::npos);
    CHECK(std::string(e.what()).find("--max-pixels") != std::string::npos);
  }
  // Batched decoding: one more KV cache (at max_context) per sequence.
  CHECK_NOTHROW(MemoryBudget(cfg, options("bf16"), 20000).check_batch(8));
  try {
    MemoryBudget(cfg, options("bf16"), 6000).check_batch(8);
    FAIL("eight more 448 MB KV caches fitted beside the bf16 2B model in 6000 MB");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("KV cache 3.9 GB") != std::string::npos);  // 9 x 448 MiB
    CHECK(std::string(e.what()).find("smaller --batch") != std::string::npos);
  }
  CHECK_THROWS_AS(MemoryBudget(cfg, options("bf16"), -1), Error);
  CHECK_THROWS_AS(estimate_session_memory(cfg, options("f16")), Error);
}

TEST_CASE("memory budget: MemAvailable from /proc/meminfo") {
  CHECK(parse_mem_available("MemTotal:       24683520 kB\nMemFree:        13154304 kB\n"
                            "MemAvailable:   23077076 kB\nBuffers:          123 kB\n") == 23077076LL * 1024);
  CHECK(parse_mem_available("MemTotal: 1 kB\n") == 0);
  CHECK(parse_mem_available("") == 0);
  CHECK(format_bytes(448 * kMiB) == "448 MB");
  CHECK(format_bytes(9 * 1024 * kMiB + 100 * kMiB) == "9.1 GB");
}
