// Which instructions this CPU has, and which tier of qvl's kernels runs.
//
// Every kernel family (GEMVs, decode ops, vision ops, matmul routing) asks
// active_isa() and runs the code of that tier; a file compiled for a tier is
// entered only when the tier is active, so it never runs on a CPU lacking the
// features it was compiled with:
//
//   avx512  AVX-512 F+BW+VL+DQ (Skylake-X, Zen 4 and later). Sub-features used
//           where present, each in a file of its own: AVX512-BF16 (dot-product
//           GEMV), AVX512-VNNI (int8 GEMV and GEMM). bf16 matmuls go to oneDNN via ATen.
//   avx2-vnni  avx2 plus vpdpbusd on 256-bit registers: AVX-VNNI (Alder Lake
//           and later Intel clients, Sierra Forest) or AVX512-VNNI+VL (which
//           lets an AVX-512 machine stand in for those CPUs). Runs the avx2
//           code except for the int8 GEMM (prefill, vision) and the int8
//           attention scores, which multiply 4 bytes per lane in one
//           instruction instead of four.
//   avx2    AVX2+FMA+F16C (Haswell, Zen 1-3, Alder Lake and later clients).
//           bf16 matmuls run in float32 (OpenBLAS) from weights widened block
//           by block: ATen's own bf16 matmul is ~1 GFLOP/s on such CPUs.
//   neon    aarch64: the portable kernels, which the compiler vectorizes with
//           NEON (always present on aarch64); on CPUs with the dot-product
//           extension (Neoverse N1 and later, Cortex-A76 and later, Apple M1
//           and later) the int8 GEMM and the int8 attention scores are sdot's
//           (int8_neon_dotprod.cpp).
//   generic any CPU: the portable kernels (vectorized for the baseline ISA).
//
// QVL_ISA=avx512|avx2-vnni|avx2|neon|generic (read once) forces a lower tier, so every
// tier can be tested and benchmarked on one machine.
#pragma once
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#define QVL_X86 1
#else
#define QVL_X86 0
#endif

namespace qvl::kernels {

struct CpuFeatures {
  // x86
  bool avx2 = false, fma = false, f16c = false, avx_vnni = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false, avx512_vnni = false;
  bool amx_bf16 = false, amx_int8 = false;
  // aarch64
  bool neon = false, neon_dotprod = false;  // dotprod: sdot/udot (FEAT_DotProd)
};

// Read from the CPU once.
const CpuFeatures& cpu_features();

// Ordered: a tier may use everything a lower one does (neon and the x86 tiers
// never meet on one CPU).
enum class Isa { Generic = 0, Neon = 1, Avx2 = 2, Avx2Vnni = 3, Avx512 = 4 };

// Whether `isa` runs the avx2 tier's code (avx2 and avx2-vnni).
inline bool runs_avx2_code(Isa isa) { return isa == Isa::Avx2 || isa == Isa::Avx2Vnni; }

const char* isa_name(Isa isa);
// Whether this CPU can run `isa`'s code.
bool isa_supported(Isa isa);
// The highest tier this CPU supports.
Isa best_isa();
// Throws qvl::Error unless this CPU can run `isa`; `caller` names the API.
void require_isa(Isa isa, const char* caller);
// best_isa(), or the tier QVL_ISA names. Read once; a name that is not a tier,
// or a tier this CPU cannot run, throws qvl::Error (front ends call this early
// so the message comes before any work).
Isa active_isa();

// The sub-features of the avx512 tier, true only when that tier is active.
bool use_avx512_bf16();  // vdpbf16ps
bool use_avx512_vnni();  // vpdpbusd

// Whether ATen's bf16 matmuls are fast here: libtorch 1.13 sends them to
// oneDNN only on CPUs with AVX-512 BW+VL+DQ, and elsewhere runs a scalar loop
// at ~1 GFLOP/s. True exactly when the avx512 tier is active; otherwise qvl
// multiplies bf16 in float32 (tensor/linear.h).
bool aten_bf16_matmul_is_fast();

// One line for --version and bench: "avx2 (cpu: avx512 bf16 vnni; forced by QVL_ISA)".
std::string isa_description();

}  // namespace qvl::kernels
