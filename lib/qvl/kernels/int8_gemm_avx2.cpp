// The avx2 tier's int8 GEMM kernel (also the avx512 tier's on CPUs without
// AVX512-VNNI). Built with AVX2 + FMA + F16C (lib/CMakeLists.txt) and entered
// only when one of those tiers is active; it must not instantiate templates or
// inline functions other files also use (the linker could keep this file's
// AVX2 copy for everyone).
//
// AVX2 has no vpdpbusd; vpmaddubsw multiplies unsigned by signed bytes and
// adds each pair into 16 bits with saturation, so the VNNI layout's q + 128
// (up to 255 · 127 · 2 > 32767) would saturate. Instead, as the AVX2 GEMV
// (quant_avx2.cpp) does: |q| is the unsigned operand, xq with q's sign the
// signed one (vpsignb), so a pair is at most 127 · 127 · 2 = 32258 and never
// saturates; vpmaddwd by ones adds the pairs into the int32 lane of 4 k.
// The panel holds the signed q (int8_gemm_detail.h's layout without the +128),
// so the group sums are exact Σ q·xq with no correction.
//
// A tile is 4 rows × 16 columns (2 registers of 8 int32): 8 accumulators,
// 2 panel registers and their magnitudes, a broadcast, a product and the
// ones fill the 16 ymm registers. The kernel around it: int8_gemm_ymm.h.
#include <immintrin.h>

#include <cstring>

#include "qvl/kernels/dot_product_asm.h"
#include "qvl/kernels/int8_gemm_detail.h"
#include "qvl/kernels/int8_gemm_ymm.h"
#include "qvl/kernels/simd_avx2.h"

namespace qvl::kernels::detail {
namespace {

namespace simd = simd_avx2;

// int8_gemm_ymm.h's Dot policy: vpsignb, vpmaddubsw, vpmaddwd by ones, vpaddd.
struct MaddubsDot {
  static constexpr int kTileRows = 4;
  static constexpr uint8_t kFlip = 0;  // signed q
  struct Weights {
    __m256i q, magnitude;
  };
  static Weights load(const uint8_t* p) {
    const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    return {q, _mm256_abs_epi8(q)};
  }
  static __m256i start(int32_t) { return _mm256_setzero_si256(); }  // no +128 to undo
  static __m256i add(__m256i acc, const Weights& w, __m256i xb) {
    return dot_asm::sign_maddubs_add(acc, w.q, w.magnitude, xb, _mm256_set1_epi16(1));
  }
};

// int8_gemm_detail.h's quantization of X rows, as the generic code does it
// (the same scale, rounding and clamp, so the same bits), 8 lanes at a time.
template <class In>
void quantize_rows(const Int8GemmJob& job, const In* x, int64_t x_stride, int64_t begin, int64_t end) {
  const Int8Matrix& w = *job.w;
  const int64_t groups = w.groups();
  const __m256 magnitude_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (int64_t m = begin; m < end; ++m) {
    const In* row = x + m * x_stride;
    int8_t* q = job.x_q + m * w.padded_cols;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t first = g * w.group_size, last = first + w.group_size < w.cols ? first + w.group_size : w.cols;
      __m256 max_abs = _mm256_setzero_ps();
      for (int64_t k = first; k < last; k += 8)
        max_abs = _mm256_max_ps(max_abs, _mm256_and_ps(simd::load(row + k, last - k), magnitude_bits));
      const float scale = simd::reduce_max(max_abs) / 127.0f;
      job.x_scales[m * groups + g] = scale;
      if (scale == 0.0f) {
        std::memset(q + first, 0, size_t(w.group_size));
        job.x_bias[m * groups + g] = 0;
        continue;
      }
      const __m256 divisor = _mm256_set1_ps(scale), low = _mm256_set1_ps(-127.0f), high = _mm256_set1_ps(127.0f);
      __m256i sum = _mm256_setzero_si256();
      // The whole group, its padding too (lanes past `last` load as 0 and stay 0).
      for (int64_t k = first; k < first + w.group_size; k += 8) {
        const __m256 level = _mm256_round_ps(_mm256_div_ps(simd::load(row + k, last - k), divisor),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256i levels = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(level, low), high));
        sum = _mm256_add_epi32(sum, levels);
        const __m128i pairs = _mm_packs_epi32(_mm256_castsi256_si128(levels), _mm256_extracti128_si256(levels, 1));
        _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_packs_epi16(pairs, pairs));
      }
      __m128i four = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      four = _mm_add_epi32(four, _mm_shuffle_epi32(four, _MM_SHUFFLE(1, 0, 3, 2)));
      four = _mm_add_epi32(four, _mm_shuffle_epi32(four, _MM_SHUFFLE(2, 3, 0, 1)));
      job.x_bias[m * groups + g] = 128 * _mm_cvtsi128_si32(four);
    }
  }
}

}  // namespace

void int8_quantize_rows_avx2(const Int8GemmJob& job, const void* x, Storage x_storage, int64_t x_stride,
                             int64_t begin, int64_t end) {
  if (x_storage == Storage::F32)
    quantize_rows(job, static_cast<const float*>(x), x_stride, begin, end);
  else
    quantize_rows(job, static_cast<const uint16_t*>(x), x_stride, begin, end);
}

void int8_gemm_panels_avx2(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  ymm_gemm::Kernel<MaddubsDot>::panels(job, first_panel, end_panel);
}

}  // namespace qvl::kernels::detail
