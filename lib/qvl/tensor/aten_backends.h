// Process-wide choice of the ATen back ends qvl's torch code may use.
#pragma once

namespace qvl::tensor {

// Called before the first ATen operation of the vision encoder and the
// decoder; idempotent. On aarch64 it turns oneDNN off: Debian's arm64
// libtorch sends bf16 convolutions and matmuls to oneDNN on a CPU with BF16
// (Graviton 3 and 4, QEMU's `max`), and that build has no aarch64 bf16
// kernels, so each such op fails with "could not create a primitive
// descriptor". ATen's own kernels then run them, as they already do on CPUs
// without BF16. Elsewhere it does nothing.
void configure_aten_backends();

// Whether ATen's bf16 operations lose more than bf16's own rounding here, so
// that a TorchScript module meant to run in bf16 must run in float32 instead:
// on aarch64, where ATen's own kernels run them, the tiny vision tower's
// bf16 forward lands more than 5 times as far from the reference as qvl's
// kernels do.
bool aten_bf16_is_inexact();

}  // namespace qvl::tensor
