#include "qvl/kernels/cpu.h"

#include <fmt/core.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "qvl/error.h"

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace qvl::kernels {
namespace {

#if defined(__aarch64__)
constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // <asm/hwcap.h> HWCAP_ASIMDDP
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if QVL_X86
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = __builtin_cpu_supports("avx512vnni");
  // GCC 12's __builtin_cpu_supports knows neither F16C, AVX-VNNI nor AMX: ask
  // CPUID directly (leaf 1 ECX bit 29; leaf 7.1 EAX bit 4; leaf 7.0 EDX 22/25),
  // and trust AMX only when the OS enabled its state (XCR0 bits 17-18).
  unsigned a, b, c, d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
  f.f16c = (c >> 29) & 1;
  const bool osxsave = (c >> 27) & 1;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
  const unsigned leaf7_edx = d;
  __asm__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
  f.avx_vnni = f.avx2 && ((a >> 4) & 1);
  if (osxsave) {
    unsigned xcr0_low, xcr0_high;
    __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    const bool amx_state = ((xcr0_low >> 17) & 3) == 3;
    f.amx_bf16 = amx_state && ((leaf7_edx >> 22) & 1);
    f.amx_int8 = amx_state && ((leaf7_edx >> 25) & 1);
  }
#elif defined(__aarch64__)
  f.neon = true;
  f.neon_dotprod = (getauxval(AT_HWCAP) & kHwcapAsimdDp) != 0;
#endif
  return f;
}

Isa from_environment() {
  const char* forced = std::getenv("QVL_ISA");
  if (forced == nullptr || *forced == '\0') return best_isa();
  const std::string name = forced;
  for (Isa isa : {Isa::Generic, Isa::Neon, Isa::Avx2, Isa::Avx2Vnni, Isa::Avx512}) {
    if (name != isa_name(isa)) continue;
    if (!isa_supported(isa))
      throw Error(fmt::format("QVL_ISA={}: this CPU cannot run the {} tier (it supports up to {})", name, name,
                              isa_name(best_isa())));
    return isa;
  }
  throw Error(fmt::format("QVL_ISA={}: not a tier; use avx512, avx2-vnni, avx2, neon or generic", name));
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Generic: return "generic";
    case Isa::Neon: return "neon";
    case Isa::Avx2: return "avx2";
    case Isa::Avx2Vnni: return "avx2-vnni";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Generic: return true;
    case Isa::Neon: return f.neon;
    case Isa::Avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::Avx2Vnni:
      return isa_supported(Isa::Avx2) && (f.avx_vnni || (f.avx512vl && f.avx512_vnni));
    case Isa::Avx512: return isa_supported(Isa::Avx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  }
  return false;
}

void require_isa(Isa isa, const char* caller) {
  if (!isa_supported(isa))
    throw Error(fmt::format("{}: this CPU cannot run the {} tier (it supports up to {})", caller, isa_name(isa),
                            isa_name(best_isa())));
}

Isa best_isa() {
  for (Isa isa : {Isa::Avx512, Isa::Avx2Vnni, Isa::Avx2, Isa::Neon})
    if (isa_supported(isa)) return isa;
  return Isa::Generic;
}

Isa active_isa() {
  static const Isa isa = from_environment();
  return isa;
}

bool use_avx512_bf16() { return active_isa() == Isa::Avx512 && cpu_features().avx512_bf16; }
bool use_avx512_vnni() { return active_isa() == Isa::Avx512 && cpu_features().avx512_vnni; }
bool aten_bf16_matmul_is_fast() { return active_isa() == Isa::Avx512; }

std::string isa_description() {
  const CpuFeatures& f = cpu_features();
  std::vector<std::string> extras;
  if (f.avx512_bf16) extras.push_back("bf16");
  if (f.avx512_vnni) extras.push_back("vnni");
  if (f.avx_vnni) extras.push_back("avx-vnni");
  if (f.amx_bf16) extras.push_back("amx");
  if (f.neon_dotprod) extras.push_back("dotprod");
  std::string cpu = isa_name(best_isa());
  for (const std::string& e : extras) cpu += " " + e;
  std::string text = isa_name(active_isa());
  if (active_isa() != best_isa()) return text + " (forced by QVL_ISA; cpu: " + cpu + ")";
  return text + " (cpu: " + cpu + ")";
}

}  // namespace qvl::kernels
