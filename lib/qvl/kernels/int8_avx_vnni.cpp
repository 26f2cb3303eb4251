// The avx2-vnni tier's int8 kernels on CPUs with AVX-VNNI (VEX-encoded 256-bit
// vpdpbusd: Alder Lake and later Intel clients, Sierra Forest): the int8
// GEMM's panels and the int8 attention scores (avx2_vnni_kernels.h). Built
// with AVX2 + FMA + F16C + AVX-VNNI (lib/CMakeLists.txt) and entered only
// when that tier is active on such a CPU.
#include "qvl/kernels/avx2_vnni_kernels.h"

namespace qvl::kernels {

void detail::int8_gemm_panels_avx_vnni(const Int8GemmJob& job, int64_t first_panel, int64_t end_panel) {
  avx2_vnni::gemm_panels(job, first_panel, end_panel);
}

void attention_detail::score_int8_avx_vnni(const Int8Operands& op, int64_t first, int64_t keys, float* s) {
  avx2_vnni::score_int8(op, first, keys, s);
}

}  // namespace qvl::kernels
