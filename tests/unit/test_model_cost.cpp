// The FLOP and byte counts behind qvl bench's efficiency figures, against
// numbers worked out by hand from the tiny fixture's config.json (hidden 32,
// 4 heads of 128, 2 KV heads, MLP 96, 4 layers, vocabulary 151936, tied; vision
// 64 wide, MLP 128, 5 blocks, 3 deepstack mergers, out 32) and from the 2B
// config.
#include <doctest/doctest.h>

#include "qvl/error.h"
#include "qvl/kernels/quant4.h"
#include "qvl/model/config.h"
#include "qvl/model/model_cost.h"
#include "test_support.h"

using namespace qvl;

namespace {
ModelConfig tiny() { return load_model_config(test::tiny_model_dir()); }
}  // namespace

TEST_CASE("decoder matrix elements and bytes per token of the tiny model") {
  const TextConfig t = tiny().text;
  // Per layer: q 512x32 + k 256x32 + v 256x32 + o 32x512 + gate, up 96x32 + down 32x96
  //   = 16384 + 8192 + 8192 + 16384 + 3 * 3072 = 58368; 4 layers = 233472;
  // output (tied embeddings) 151936 x 32 = 4861952.
  CHECK(decoder_matrix_elements(t) == 233472 + 4861952);
  // Vectors: per layer 2 norms of 32 + q/k norms of 128 = 320, x4, + final norm 32 = 1312.
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::None) == 2.0 * (5095424 + 1312));
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::F32, WeightQuant::None) == 4.0 * (5095424 + 1312));
  // int8, groups of 128 (132 bytes with the scale): q 512 rows x 1 group = 67584,
  // k, v 256 x 1 = 33792 each, o 32 rows x 4 groups = 16896, gate, up 96 x 1 =
  // 12672 each, down 32 x 1 = 4224: 181632 per layer, 726528 for 4; output 151936 x 132.
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::Int8, 128) ==
        726528.0 + 151936.0 * 132 + 2 * 1312);
  // Groups of 64: o is 32 rows x 8 groups of 68 bytes; every other matrix's
  // rows hold one or two groups (down: 96 columns = 2 groups).
  const double g64 = 4 * (512 * 68 + 256 * 68 * 2 + 32 * 8 * 68 + 96 * 68 * 2 + 32 * 2 * 68) + 151936.0 * 68;
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::Int8, 64) == g64 + 2 * 1312);
  CHECK_THROWS_AS(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::Int8, 0), Error);
  // int4: rows padded to 128 columns, 64 bytes of levels + 2 groups x 4 bytes of
  // float16 scale and offset = 72 bytes for 32 or 96 columns, 288 for o's 512:
  // q 512x72 + k, v 2x256x72 + o 32x288 + gate, up 2x96x72 + down 32x72 = 99072
  // per layer, 396288 for 4; output 151936 x 72.
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::Int4) ==
        396288.0 + 151936.0 * 72 + 2 * 1312);
}

TEST_CASE("int4 bytes per token agree with the int4 matrices the kernels allocate") {
  const TextConfig t = tiny().text;
  auto bytes = [](int64_t rows, int64_t cols) {
    const kernels::QuantizedInt4Matrix m(rows, cols);
    return double(m.view().level_bytes() + m.view().param_bytes());
  };
  const double layer = bytes(512, 32) + 2 * bytes(256, 32) + bytes(32, 512) + 2 * bytes(96, 32) + bytes(32, 96);
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::Int4) ==
        4 * layer + bytes(151936, 32) + 2 * 1312);
}

TEST_CASE("prefill FLOPs of the tiny model") {
  const TextConfig t = tiny().text;
  // 10 new tokens: projections 2*10*233472 = 4669440; attention over 1+2+..+10 = 55
  // (query, key) pairs, 4 FLOPs per pair and head dimension: 4 layers * 4 * 512 * 55 =
  // 450560; the output projection for the last token 2 * 4861952 = 9723904.
  CHECK(prefill_flops(t, 10) == 4669440.0 + 450560.0 + 9723904.0);
  // 2 new tokens after 5 cached: pairs 6 + 7 = 13.
  CHECK(prefill_flops(t, 2, 5) == 2 * 2 * 233472.0 + 4 * 4 * 512 * 13.0 + 9723904.0);
  CHECK(prefill_flops(t, 0) == 0);
}

TEST_CASE("vision FLOPs of the tiny model, attention within each image") {
  const VisionConfig v = tiny().vision;
  // 16 patches: embedding 2*16*1536*64 = 3145728; per block projections
  // 2*16*(3*4096 + 4096 + 2*64*128) = 1048576 and attention 4*64*16*16 = 65536,
  // x5 blocks = 5570560; 4 mergers (final + 3 deepstack) on 4 merged tokens:
  // 4 * 2 * 4 * (256*256 + 32*256) = 2359296.
  const double sixteen = 3145728.0 + 5570560.0 + 2359296.0;
  CHECK(vision_flops(v, {16}) == sixteen);
  // 4 patches: 786432 + 5 * (262144 + 4096) + 4 * 2 * 1 * 73728.
  const double four = 786432.0 + 5 * 266240.0 + 589824.0;
  CHECK(vision_flops(v, {16, 4}) == sixteen + four);
  CHECK(vision_flops(v, {16, 4}) < vision_flops(v, {20}));  // no attention across images
  CHECK(vision_flops(v, {}) == 0);
}

TEST_CASE("the 2B model streams 3.44 GB per bf16 token, 1.77 GB per int8 token") {
  const TextConfig t = load_model_config(test::data_path("qwen3-vl-2b")).text;
  // 28 layers x 50.33 M + 151936 x 2048 = 1.72 G elements: docs/PERFORMANCE.md's
  // 3.44 GB/token (bf16) and 1.76 GB + scales (int8).
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::None) == doctest::Approx(3.441e9).epsilon(0.001));
  CHECK(decode_weight_bytes_per_token(t, ComputeDtype::BF16, WeightQuant::Int8) ==
        doctest::Approx(1.720e9 * 132 / 128).epsilon(0.002));
  // 336 tokens (a 640x480 question): ~2 * 336 * 1.41 G of projections.
  CHECK(prefill_flops(t, 336) == doctest::Approx(2 * 336 * 1.4093e9).epsilon(0.03));
}
