#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "thread_pool.h"

#if defined(__APPLE__) && defined(DARKNET_PY_ACCELERATE)
#include <Accelerate/Accelerate.h>
#endif

namespace dn {

namespace {

// Register tile: MR rows x NR columns of C held in 2*MR vector registers. With AVX-512 a vector
// holds 16 floats and there are 32 registers (12x32 tile: 24 accumulators); otherwise 8 floats and
// 16 registers (6x16: 12 accumulators). NEON builds use the 8-float form as pairs of q registers.
#if defined(__AVX512F__)
constexpr int VW = 16, MR = 12;
#else
constexpr int VW = 8, MR = 6;
#endif
constexpr int NR = 2 * VW, KC = 256, NC = 3072;
typedef float vec __attribute__((vector_size(VW * 4), aligned(4)));

// acc = A_panel(MR x kc) * B_panel(kc x NR); then C = (first ? beta*C : C) + alpha*acc on an mr x nr corner.
void micro_kernel(int kc, const float* a, const float* b, float* C, int ldc, int mr, int nr, float alpha, float beta,
                  bool first) {
    vec acc[MR][2];
    for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = vec{};
    for (int k = 0; k < kc; ++k) {
        vec b0, b1;
        std::memcpy(&b0, b + k * NR, VW * 4);
        std::memcpy(&b1, b + k * NR + VW, VW * 4);
        const float* ak = a + k * MR;
        for (int r = 0; r < MR; ++r) {
            acc[r][0] += ak[r] * b0;
            acc[r][1] += ak[r] * b1;
        }
    }
    alignas(64) float tile[MR][NR];
    for (int r = 0; r < MR; ++r) {
        std::memcpy(&tile[r][0], &acc[r][0], VW * 4);
        std::memcpy(&tile[r][VW], &acc[r][1], VW * 4);
    }
    for (int r = 0; r < mr; ++r) {
        float* c = C + (size_t)r * ldc;
        if (first && beta == 0)
            for (int j = 0; j < nr; ++j) c[j] = alpha * tile[r][j];
        else if (first)
            for (int j = 0; j < nr; ++j) c[j] = beta * c[j] + alpha * tile[r][j];
        else
            for (int j = 0; j < nr; ++j) c[j] += alpha * tile[r][j];
    }
}

// Packs rows [i0, i0+mc) x cols [k0, k0+kc) of op(A) into MR-row panels, k-major, zero-padded.
void pack_a(bool ta, const float* A, int lda, int i0, int mc, int k0, int kc, float* out) {
    for (int p = 0; p < mc; p += MR) {
        float* dst = out + (size_t)p * kc;
        int rows = std::min(MR, mc - p);
        for (int k = 0; k < kc; ++k)
            for (int r = 0; r < MR; ++r) {
                float v = 0;
                if (r < rows) {
                    int i = i0 + p + r, kk = k0 + k;
                    v = ta ? A[(size_t)kk * lda + i] : A[(size_t)i * lda + kk];
                }
                dst[k * MR + r] = v;
            }
    }
}

// Packs one NR-column panel of op(B) rows [k0, k0+kc), cols [j0, j0+nr).
void pack_b_panel(bool tb, const float* B, int ldb, int k0, int kc, int j0, int nr, float* dst) {
    if (!tb && nr == NR) {
        for (int k = 0; k < kc; ++k) std::memcpy(dst + k * NR, B + (size_t)(k0 + k) * ldb + j0, NR * 4);
        return;
    }
    for (int k = 0; k < kc; ++k)
        for (int j = 0; j < NR; ++j) {
            float v = 0;
            if (j < nr) v = tb ? B[(size_t)(j0 + j) * ldb + k0 + k] : B[(size_t)(k0 + k) * ldb + j0 + j];
            dst[k * NR + j] = v;
        }
}

}  // namespace

const char* cpu_sgemm_kernel() {
#if defined(__AVX512F__)
    return "12x32 tile, 16-float vectors (AVX-512)";
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
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, beta, C, ldc);
    return;
#endif
    if (K <= 0) {
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
    ThreadPool& pool = ThreadPool::instance();
    int m_panels = (M + MR - 1) / MR;
    thread_local std::vector<float> apack, bpack;
    apack.resize((size_t)m_panels * MR * KC);
    bpack.resize((size_t)KC * NC);
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = std::min(KC, K - k0);
        bool first = k0 == 0;
        float* ap = apack.data();
        pool.parallel_for(m_panels, [&](size_t b, size_t e) {
            for (size_t p = b; p < e; ++p) {
                int i0 = (int)p * MR;
                pack_a(ta, A, lda, i0, std::min(MR, M - i0), k0, kc, ap + (size_t)p * MR * kc);
            }
        });
        for (int j0 = 0; j0 < N; j0 += NC) {
            int nc = std::min(NC, N - j0);
            int n_panels = (nc + NR - 1) / NR;
            float* bp = bpack.data();
            pool.parallel_for(n_panels, [&](size_t b, size_t e) {
                for (size_t q = b; q < e; ++q) {
                    int jj = j0 + (int)q * NR;
                    pack_b_panel(tb, B, ldb, k0, kc, jj, std::min(NR, N - jj), bp + (size_t)q * NR * kc);
                }
            });
            // tiles ordered panel-of-B major so consecutive tiles of a thread reuse the same B panel
            size_t tiles = (size_t)n_panels * m_panels;
            pool.parallel_for(tiles, [&](size_t b, size_t e) {
                for (size_t t = b; t < e; ++t) {
                    int q = (int)(t / m_panels), p = (int)(t % m_panels);
                    int i0 = p * MR, jj = j0 + q * NR;
                    micro_kernel(kc, ap + (size_t)p * MR * kc, bp + (size_t)q * NR * kc, C + (size_t)i0 * ldc + jj,
                                 ldc, std::min(MR, M - i0), std::min(NR, N - jj), alpha, beta, first);
                }
            }, 4);
        }
    }
}

}  // namespace dn
