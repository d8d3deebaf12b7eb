// The blocked GEMM loop shared by cpu_sgemm and the convolution: C = epilogue(A * B) where A is
// packed once up front (pack_a) and B is packed per job by a caller-supplied function, so the
// convolution can pack its B panels straight from the image (implicit GEMM: no im2col buffer).
#pragma once
#include "isa.h"
#include <algorithm>
#include <vector>

#include "microkernel.h"
#include "thread_pool.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

// Bytes-aware block sizes: a kc x MR panel of A (12 KB with AVX-512) stays in L1 while it meets
// every B panel of the job's block, which (kc x NB_PANELS*NR, 576 KB) stays in L2.
constexpr int GEMM_KC = 384, GEMM_NB_PANELS = 8;

inline size_t packed_a_floats(int M, int K) {
    return (size_t)((M + simd::MR - 1) / simd::MR) * simd::MR * K;
}

// Packs op(A) (M x K) into MR-row panels spanning all of K: panel p starts at out + p*MR*K and holds
// a[k*MR + r] = op(A)[p*MR + r][k], zero rows past M. Runs on the pool.
void pack_a(bool trans_a, const float* A, long lda, int M, int K, float* out);

// Splits K into near-equal blocks of at most GEMM_KC (576 = 288 + 288, not 384 + 192).
inline int gemm_kc(int K) {
    int nk = (K + GEMM_KC - 1) / GEMM_KC;
    int kc = (K + nk - 1) / nk;
    return (kc + 3) & ~3;
}

// For b in [0, batches): C_b (M x N, rows ldc apart, C + b*c_stride) = epilogue(A * B_b), A packed
// by pack_a (lda = 0) or row-major with rows lda apart (lda > 0; see simd::tile), with
// pack_b(b, k0, kc, j0, nr, dst) writing rows [k0, k0+kc) x columns [j0, j0+nr) of B_b into a
// kc x NR panel (dst[k*NR + j]; columns past nr may hold anything finite). K >= 1.
// Jobs are (batch, block of columns, block of rows). With too few column blocks to keep every thread
// busy, the rows are split first, into blocks of at least GEMM_MIN_ROW_PANELS panels: each row block
// re-packs the B panels (kc x NB_PANELS*NR floats, from an image small enough to have few columns),
// while each extra column block would stream all of A once more (A is the larger operand there: the
// weights of a 13x13 or 26x26 layer). Only then are the column blocks narrowed.
constexpr int GEMM_MIN_ROW_PANELS = 4;
template <class PackB>
void gemm_driver(int batches, int M, int N, int K, const float* A, long lda, PackB&& pack_b, float* C,
                 long c_stride, long ldc, const Epilogue& e) {
    using namespace simd;
    const int threads = ThreadPool::instance().threads();
    const int m_panels = (M + MR - 1) / MR, n_panels = (N + NR - 1) / NR;
    const int want_jobs = threads > 1 ? 4 * threads : 1;
    int nbp = std::min(GEMM_NB_PANELS, n_panels);
    const long column_jobs = (long)batches * ((n_panels + nbp - 1) / nbp);
    const int row_split = column_jobs >= want_jobs ? 1
                          : std::min(std::max(1, m_panels / GEMM_MIN_ROW_PANELS),
                                     (int)((want_jobs + column_jobs - 1) / column_jobs));
    if (column_jobs * row_split < want_jobs)  // the rest from narrower column blocks
        nbp = std::max(1, (int)(((long)n_panels * batches * row_split + want_jobs - 1) / want_jobs));
    const int n_blocks = (n_panels + nbp - 1) / nbp;
    int m_blocks = 1;
    if ((long)batches * n_blocks < want_jobs)
        m_blocks = std::min(m_panels, (int)((want_jobs + (long)batches * n_blocks - 1) / ((long)batches * n_blocks)));
    const int mbp = (m_panels + m_blocks - 1) / m_blocks;
    m_blocks = (m_panels + mbp - 1) / mbp;
    const int kcmax = gemm_kc(K);
    const long jobs = (long)batches * n_blocks * m_blocks;

    ThreadPool::instance().run_jobs((size_t)jobs, [&](size_t job) {
        thread_local std::vector<float> bbuf;
        int mb = (int)(job % m_blocks);
        long rest = (long)(job / m_blocks);
        int nb = (int)(rest % n_blocks), b = (int)(rest / n_blocks);
        int q0 = nb * nbp, q1 = std::min(n_panels, q0 + nbp);
        int p0 = mb * mbp, p1 = std::min(m_panels, p0 + mbp);
        if ((long)bbuf.size() < (long)kcmax * nbp * NR) bbuf.resize((size_t)kcmax * nbp * NR);
        float* cb = C + b * c_stride;
        for (int k0 = 0; k0 < K; k0 += kcmax) {
            int kc = std::min(kcmax, K - k0);
            bool first = k0 == 0, last = k0 + kc == K;
            for (int q = q0; q < q1; ++q)
                pack_b(b, k0, kc, q * NR, std::min(NR, N - q * NR), bbuf.data() + (size_t)(q - q0) * kc * NR);
            for (int p = p0; p < p1; ++p) {
                const float* a = lda ? A + (size_t)p * MR * lda + k0 : A + (size_t)p * MR * K + (size_t)k0 * MR;
                int mr = std::min(MR, M - p * MR);
                float* crow = cb + (long)p * MR * ldc;
                for (int q = q0; q < q1; ++q)
                    tile(kc, a, lda, bbuf.data() + (size_t)(q - q0) * kc * NR, crow + q * NR, ldc, mr,
                         std::min(NR, N - q * NR), e, p * MR, first, last);
            }
        }
    });
}

}  // namespace DARKNET_ISA
}  // namespace dn
