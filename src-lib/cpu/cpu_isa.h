// Which copy of the CPU kernels runs (isa.h): chosen once, on first use, from the copies built in
// (cpu_isa_built) as DARKNET_PY_ISA says or else the widest this CPU executes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../backend.h"
#include "loader_pixels.h"

namespace dn {

// The entry points of one copy (isa_entry.cpp defines one table per copy).
struct CpuIsaKernels {
    const char* name;          // "avx512", "avx2", "generic", "neon" or "native" (-march=native)
    const char* sgemm_kernel;  // the GEMM register tile, e.g. "6x16 tile, 8-float vectors (AVX2)"
    std::unique_ptr<Backend> (*make_backend)();
    // C[M,N] = alpha * op(A) * op(B) + beta * C, row-major with leading dimensions
    void (*sgemm)(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc);
    void (*pixels_into_batch)(const PixelsIntoBatch& p);  // the loader's colour pass (loader_pixels.h)
};

// The copy in use. Throws DarknetError when DARKNET_PY_ISA names a copy that is not built in or
// that this CPU cannot execute (a forced choice never silently becomes another); the next call
// then tries again.
const CpuIsaKernels& cpu_isa();

// Names of the copies built in, widest first, and of those this CPU can execute.
std::vector<std::string> cpu_isa_built();
std::vector<std::string> cpu_isa_runnable();

}  // namespace dn
