// The GEMM register tile and its epilogue, shared by the plain GEMM, the convolution (implicit
// GEMM) and Winograd. Operands are packed: A as MR-row panels (k-major: a[k*MR + r]), B as
// NR-column panels (b[k*NR + j]), both zero-padded, so the inner loop has no edge cases.
#pragma once
#include "isa.h"
#include "../activation.h"
#include "simd.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

// What happens when a tile of C is written. Over K blocks: the first writes alpha*acc + beta*C
// (C is not read when beta = 0, as in BLAS), later ones add alpha*acc; the last one then applies
// the per-row affine (folded batch norm: C*scale[row] + shift[row]) and the activation, so
// conv + batchnorm + activation leave the register tile once, finished.
struct Epilogue {
    float alpha = 1.0f, beta = 0.0f;
    const float* scale = nullptr;  // per row of C; null = 1
    const float* shift = nullptr;  // per row of C; null = no affine
    Activation act = Activation::linear;
};

namespace simd {

// acc = A(MR x kc) * B_panel(kc x NR), then written to the mr x nr corner at C.
// A is a packed panel (lda = 0: a[k*MR + r]) or, with lda > 0, MR rows of a row-major matrix
// (a[r*lda + k]; rows past mr repeat row mr-1), which lets the convolution use its weights as
// they are, with no packing pass. row0 is the tile's first row of C (indexes scale/shift).
inline void tile(int kc, const float* __restrict a, long lda, const float* __restrict b, float* C, long ldc, int mr,
                 int nr, const Epilogue& e, int row0, bool first, bool last) {
    vec acc[MR][NV];
    for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) acc[r][v] = vec{};
    if (lda == 0) {
        for (int k = 0; k < kc; ++k) {
            vec bv[NV];
            for (int v = 0; v < NV; ++v) bv[v] = load(b + v * VW);
            for (int r = 0; r < MR; ++r) {
                float ar = a[r];
                for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v];
            }
            a += MR;
            b += NR;
        }
    } else {
        const float* __restrict rows[MR];
        for (int r = 0; r < MR; ++r) rows[r] = a + (r < mr ? r : mr - 1) * lda;
        for (int k = 0; k < kc; ++k) {
            vec bv[NV];
            for (int v = 0; v < NV; ++v) bv[v] = load(b + v * VW);
            for (int r = 0; r < MR; ++r) {
                float ar = rows[r][k];
                for (int v = 0; v < NV; ++v) acc[r][v] += ar * bv[v];
            }
            b += NR;
        }
    }
    bool affine = last && e.shift;
    bool act = last && e.act != Activation::linear;
    bool read_c = !first || e.beta != 0.0f;
    float cb = first ? e.beta : 1.0f;
    for (int r = 0; r < mr; ++r) {
        float* c = C + r * ldc;
        float k = affine && e.scale ? e.scale[row0 + r] : 1.0f, s = affine ? e.shift[row0 + r] : 0.0f;
        for (int v = 0; v < NV; ++v) {
            int n = nr - v * VW;
            if (n <= 0) break;
            if (n > VW) n = VW;
            vec x = acc[r][v];
            if (e.alpha != 1.0f) x *= e.alpha;
            if (read_c) x += cb * load_n(c + v * VW, n);
            if (affine) x = x * k + s;
            if (act) x = activate(x, e.act);
            store_n(c + v * VW, x, n);
        }
    }
}

}  // namespace simd
}  // namespace DARKNET_ISA
}  // namespace dn
