#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "gemm_driver.h"
#include "thread_pool.h"

#if defined(__APPLE__) && defined(DARKNET_PY_ACCELERATE)
#ifdef DARKNET_PY_APPLE_API_DECLS  // the macOS cross-compile in CI, which has no Apple SDK
#include "../../src-metal/apple_api_decls/Accelerate.h"
#else
#include <Accelerate/Accelerate.h>
#endif
#endif

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

void pack_a(bool ta, const float* A, long lda, int M, int K, float* out) {
    using simd::MR;
    int panels = (M + MR - 1) / MR;
    ThreadPool::instance().parallel_for((size_t)panels, [&](size_t b, size_t e) {
        for (size_t p = b; p < e; ++p) {
            float* dst = out + p * MR * K;
            int i0 = (int)p * MR, rows = std::min(MR, M - i0);
            if (!ta) {
                // rows of A are contiguous in k: interleave MR of them
                for (int r = 0; r < MR; ++r) {
                    if (r >= rows) {
                        for (int k = 0; k < K; ++k) dst[k * MR + r] = 0.0f;
                        continue;
                    }
                    const float* src = A + (long)(i0 + r) * lda;
                    for (int k = 0; k < K; ++k) dst[k * MR + r] = src[k];
                }
            } else {
                for (int k = 0; k < K; ++k) {
                    const float* src = A + (long)k * lda + i0;
                    for (int r = 0; r < MR; ++r) dst[k * MR + r] = r < rows ? src[r] : 0.0f;
                }
            }
        }
    });
}

const char* cpu_sgemm_kernel() {
#if defined(__AVX512F__)
    return "8x48 tile, 16-float vectors (AVX-512)";
#elif defined(__AVX2__)
    return "6x16 tile, 8-float vectors (AVX2)";
#elif defined(__ARM_NEON)
    return "6x16 tile, 4-float vector pairs (NEON)";
#else
    return "6x16 tile, compiler-generic vectors";
#endif
}

void cpu_sgemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
               float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) return;
#if defined(__APPLE__) && defined(DARKNET_PY_ACCELERATE)
    // The classic CBLAS symbol, which every macOS exports. ACCELERATE_NEW_LAPACK would bind to
    // cblas_sgemm$NEWLAPACK, which exists from macOS 13.3 only (our minimum is 13.0), for nothing
    // we need (ILP64). SDKs from 13.3 mark the classic one deprecated when building for 13.3+.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
#pragma clang diagnostic pop
    return;
#endif
    if (K <= 0 || alpha == 0.0f) {
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    using simd::NR;
    thread_local std::vector<float> apack;
    apack.resize(packed_a_floats(M, K));
    pack_a(ta, A, lda, M, K, apack.data());
    auto pack_b = [&](int, int k0, int kc, int j0, int nr, float* dst) {
        if (!tb) {
            for (int k = 0; k < kc; ++k) {
                const float* src = B + (long)(k0 + k) * ldb + j0;
                if (nr == NR) std::memcpy(dst + k * NR, src, NR * 4);
                else for (int j = 0; j < NR; ++j) dst[k * NR + j] = j < nr ? src[j] : 0.0f;
            }
        } else {
            for (int j = 0; j < NR; ++j) {
                const float* src = B + (long)(j0 + std::min(j, nr - 1)) * ldb + k0;
                for (int k = 0; k < kc; ++k) dst[k * NR + j] = src[k];
            }
        }
    };
    Epilogue e;
    e.alpha = alpha;
    e.beta = beta;
    gemm_driver(1, M, N, K, apack.data(), 0, pack_b, C, 0, ldc, e);
}

}  // namespace DARKNET_ISA
}  // namespace dn
