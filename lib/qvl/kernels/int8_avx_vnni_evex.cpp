// The avx2-vnni tier's int8 kernels on CPUs without AVX-VNNI but with
// AVX512-VNNI+VL: int8_avx_vnni.cpp's kernels with the EVEX encoding of the
// 256-bit vpdpbusd (avx2_vnni_kernels.h), so that an AVX-512 machine forced to the
// avx2-vnni tier (QVL_ISA=avx2-vnni) runs and tests what an Alder Lake runs.
// Built with AVX2 + FMA + F16C + AVX-512 F/VL + AVX512-VNNI (lib/CMakeLists.txt).
#include "qvl/kernels/avx2_vnni_kernels.h"

namespace qvl::kernels {

void detail::int8_gemm_panels_avx_vnni_evex(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  avx2_vnni::gemm_panels(job, first_panel, end_panel);
}

void attention_detail::score_int8_avx_vnni_evex(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
  avx2_vnni::score_int8(op, first, keys, s);
}

}  // namespace qvl::kernels
