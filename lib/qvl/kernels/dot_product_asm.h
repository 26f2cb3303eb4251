// Internal to lib/qvl/kernels: the int8 kernels' innermost step as inline
// assembly — vpdpbusd (512- and 256-bit), and AVX2's four-instruction
// stand-in for it.
//
// Why not the intrinsics: GCC 12 does not update the accumulator of
// _mm512_dpbusd_epi32 / _mm256_dpbusd_(avx_)epi32 in place inside a tile's
// loop. It copies each accumulator to a scratch register, multiplies there
// and copies it back (two vmovdqa per vpdpbusd), and with the 16 registers of
// VEX code it spills accumulators to the stack on every step. Tying the
// accumulator with "+x"/"+v" gives the loop one vpdpbusd per product and
// nothing else. Measured on an AMD EPYC family 26 model 2 (Zen 5, which has
// AVX-VNNI), 2 threads, 512 rows, `qvl_bench_int8_gemm 3 512 2 int8`: the
// avx2-vnni tier's VEX kernel 320–340 → 580–690 GOP/s (its EVEX twin
// 420–530 → the same 580–680), the avx512 tier's 910–1040 → 1150–1300, and
// the avx2 tier's (sign_maddubs_add below) 280–288 → 309–323. Other
// compilers (clang, for the fuzzers) get the intrinsics.
//
// Include only from files built with the instruction set a function needs;
// each is static, so every such file keeps its own copy.
#pragma once
#include <immintrin.h>

namespace qvl::kernels::dot_asm {

// dpbusd512 and dpbusd256: acc + Σ of the 4 products of u's unsigned bytes and
// s's signed bytes, per 32-bit lane, exactly (no saturation).
#if defined(__AVX512VNNI__)
static inline __m512i dpbusd512(__m512i acc, __m512i u, __m512i s) {
#if defined(__GNUC__) && !defined(__clang__)
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#else
  return _mm512_dpbusd_epi32(acc, u, s);
#endif
}
#endif

// The 256-bit form: VEX-encoded where the file is built for AVX-VNNI (Alder
// Lake and later Intel clients, Zen 5), else EVEX (AVX512-VNNI + VL).
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
static inline __m256i dpbusd256(__m256i acc, __m256i u, __m256i s) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVXVNNI__)
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
  return acc;
#elif defined(__GNUC__) && !defined(__clang__)
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
  return acc;
#elif defined(__AVXVNNI__)
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_dpbusd_epi32(acc, u, s);
#endif
}
#endif

// AVX2's stand-in for it where the weights are signed (int8_gemm_avx2.cpp):
// acc + Σ of the 4 products of q and x per 32-bit lane, given |q|, the sign
// of q moved onto x (vpsignb) and ones = 16-bit 1s. In one asm block so that
// GCC keeps each row's steps together instead of computing every row's
// temporaries first and spilling the accumulators.
#if defined(__AVX2__)
static inline __m256i sign_maddubs_add(__m256i acc, __m256i q, __m256i magnitude, __m256i x, __m256i ones) {
#if defined(__GNUC__) && !defined(__clang__)
  __m256i t;
  asm("vpsignb %[q], %[x], %[t]\n\t"
      "vpmaddubsw %[t], %[m], %[t]\n\t"
      "vpmaddwd %[ones], %[t], %[t]\n\t"
      "vpaddd %[t], %[acc], %[acc]"
      : [acc] "+x"(acc), [t] "=&x"(t)
      : [q] "x"(q), [m] "x"(magnitude), [x] "x"(x), [ones] "x"(ones));
  return acc;
#else
  const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(x, q));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
#endif
}
#endif

}  // namespace qvl::kernels::dot_asm
