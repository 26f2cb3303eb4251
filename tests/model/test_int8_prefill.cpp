// int8 prefill (--quant int8, prompts longer than tensor::kInt8GemvMaxRows:
// the int8 × int8 GEMM of kernels/int8_gemm.h where the tier has one) against
// the float32 reference's first-step logits on the tiny checkpoint, next to
// bf16's error on the same prompts. Prints the accuracy table of
// docs/PERFORMANCE.md ("int8 matmuls").
#include <unistd.h>

#include <filesystem>
#include <string>

#include "qvl/decoder/decoder.h"
#include "qvl/kernels/int8_gemm.h"
#include "qvl/tensor/linear.h"
#include "test_support.h"

#include "golden_prompts.h"

using namespace qvl;
using namespace qvl::test;
namespace fs = std::filesystem;

namespace {

Decoder make(WeightQuant quant, const std::string& cache_dir) {
  DecoderOptions o;
  o.dtype = at::kBFloat16;
  o.max_context = 256;
  o.quant = quant;
  o.quant_cache_dir = cache_dir;
  return Decoder(tiny_checkpoint(), tiny_config(), o);
}

int leading_agreement(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return int(n);
}

}  // namespace

// How far int8 prefill's logits may be from float32's. bf16 alone moved the
// reference's logits by bf16_vs_fp32_last_maxabs (~0.02): activations and
// weights rounded to 8 significant bits. int8 rounds each weight by up to
// max|w| / 254 of its group of 128 and each activation by max|x| / 254 of
// its group — for groups whose largest value is ~3 standard deviations, an
// error ~3-4x bf16's per element, on both operands of every product — and
// keeps bf16 activations between the matmuls: measured 2.6-3.8x bf16's
// error on the four cases, so 5x leaves room for the two roundings adding up
// differently; broken arithmetic (a lost scale or correction term) moves
// logits of order 2 by far more.
constexpr double kInt8VsFloatFactor = 5.0;

TEST_CASE("int8 prefill: first-step logits within the int8 bound of the float32 reference, same top-1") {
  const fs::path dir = fs::temp_directory_path() / ("qvl_test_int8_prefill_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    Decoder bf16 = make(WeightQuant::None, "");
    Decoder int8 = make(WeightQuant::Int8, dir.string());
    int long_prompts = 0, greedy_int8 = 0, greedy_bf16 = 0, greedy_total = 0;
    for (const std::string& name : kCases) {
      CAPTURE(name);
      const Prompt p = load_prompt(name);
      long_prompts += p.length() > tensor::kInt8GemvMaxRows;
      const at::Tensor reference = golden(name + ".logits_last");
      bf16.reset();
      int8.reset();
      const at::Tensor a = bf16.prefill(0, p.embeds, p.positions, p.deepstack_ptr()).to(at::kFloat);
      const at::Tensor b = int8.prefill(0, p.embeds, p.positions, p.deepstack_ptr()).to(at::kFloat);
      const double bound = kInt8VsFloatFactor * model_case(name)["bf16_vs_fp32_last_maxabs"].get<double>();
      CHECK(top1(b) == top1(reference));
      CHECK(max_abs_diff(b, reference) <= bound);

      const std::vector<int64_t> expected = model_case(name)["greedy_16"].get<std::vector<int64_t>>();
      const int same_int8 = leading_agreement(greedy(int8, p, 16), expected);
      const int same_bf16 = leading_agreement(greedy(bf16, p, 16), expected);
      greedy_int8 += same_int8;
      greedy_bf16 += same_bf16;
      greedy_total += int(expected.size());
      MESSAGE("| " << name << " | " << p.length() << " | " << max_abs_diff(a, reference) << " / "
                   << (a - reference).abs().mean().item<double>() << " | " << max_abs_diff(b, reference) << " / "
                   << (b - reference).abs().mean().item<double>() << " | " << (top1(a) == top1(reference)) << " / "
                   << (top1(b) == top1(reference)) << " | " << same_bf16 << " / " << same_int8 << " of "
                   << expected.size() << " |");
    }
    MESSAGE("greedy_16 leading tokens equal to the reference's: bf16 " << greedy_bf16 << ", int8 " << greedy_int8
                                                                       << " of " << greedy_total);
    // The cases must exercise the long-input route (the GEMM where there is one).
    CHECK(long_prompts >= 3);
    MESSAGE("int8 GEMM kernel on this tier: " << kernels::gemm_int8_is_fast());
  }
  fs::remove_all(dir);
}
