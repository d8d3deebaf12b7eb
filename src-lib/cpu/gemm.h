// Single-precision GEMM for the CPU backend: packed panels and a register-tile micro-kernel
// written with GCC/Clang vector extensions (AVX2/AVX-512 on x86, NEON on ARM with -march=native).
#pragma once
#include "isa.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions.
void cpu_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
               int ldb, float beta, float* C, int ldc);

// Describes the micro-kernel compiled in, e.g. "8x48 tile, 16-float vectors (AVX-512)", for `darknet_py info`.
const char* cpu_sgemm_kernel();

}  // namespace DARKNET_ISA
}  // namespace dn
