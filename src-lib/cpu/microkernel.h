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

// The epilogue of a whole MR x NVT*VW tile; act is the activation (applied on the last K block).
template <int NVT, class Act>
inline void finish_tile(vec (&acc)[MR][NVT], float* C, long ldc, const Epilogue& e, int row0, bool first, bool last,
                        Act act) {
    const bool affine = last && e.shift, read_c = !first || e.beta != 0.0f;
    const float cb = first ? e.beta : 1.0f;
    for (int r = 0; r < MR; ++r) {
        float* c = C + r * ldc;
        float k = affine && e.scale ? e.scale[row0 + r] : 1.0f, s = affine ? e.shift[row0 + r] : 0.0f;
        for (int v = 0; v < NVT; ++v) {
            vec x = acc[r][v];
            if (e.alpha != 1.0f) x *= e.alpha;
            if (read_c) x += cb * load(c + v * VW);
            if (affine) x = x * k + s;
            if (last) x = act(x);
            store(c + v * VW, x);
        }
    }
}

// The epilogue of a partial tile (mr < MR rows or nr < NVT*VW columns), out of line: it indexes
// the accumulators at run time, which would otherwise keep them in memory on every path.
template <int NVT>
__attribute__((noinline)) void store_edge(const vec (&acc)[MR][NVT], float* C, long ldc, int mr, int nr,
                                          const Epilogue& e, int row0, bool first, bool last) {
    bool affine = last && e.shift;
    bool act = last && e.act != Activation::linear;
    bool read_c = !first || e.beta != 0.0f;
    float cb = first ? e.beta : 1.0f;
    for (int r = 0; r < mr; ++r) {
        float* c = C + r * ldc;
        float k = affine && e.scale ? e.scale[row0 + r] : 1.0f, s = affine ? e.shift[row0 + r] : 0.0f;
        for (int v = 0; v < NVT; ++v) {
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

// acc = A(MR x kc) * B_panel(kc x NVT*VW), then written to the mr x nr corner at C. The B panel
// is NR wide (b[k*NR + j]); a tile of NVT < NV vectors reads only its first NVT*VW columns, which
// lets the last panel of a narrow C (13x13 = 169 pixels: 3 x 48 + 25) skip the vectors that
// would only multiply padding (see tile below).
// A is a packed panel (lda = 0: a[k*MR + r]) or, with lda > 0, MR rows of a row-major matrix
// (a[r*lda + k]; rows past mr repeat row mr-1), which lets the convolution use its weights as
// they are, with no packing pass. row0 is the tile's first row of C (indexes scale/shift).
template <int NVT>
inline void tile_nv(int kc, const float* __restrict a, long lda, const float* __restrict b, float* C, long ldc,
                    int mr, int nr, const Epilogue& e, int row0, bool first, bool last) {
    vec acc[MR][NVT];
    for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NVT; ++v) acc[r][v] = vec{};
    if (lda == 0) {
        for (int k = 0; k < kc; ++k) {
            vec bv[NVT];
            for (int v = 0; v < NVT; ++v) bv[v] = load(b + v * VW);
            for (int r = 0; r < MR; ++r) {
                float ar = a[r];
                for (int v = 0; v < NVT; ++v) acc[r][v] += ar * bv[v];
            }
            a += MR;
            b += NR;
        }
    } else {
        const float* __restrict rows[MR];
        for (int r = 0; r < MR; ++r) rows[r] = a + (r < mr ? r : mr - 1) * lda;
        for (int k = 0; k < kc; ++k) {
            vec bv[NVT];
            for (int v = 0; v < NVT; ++v) bv[v] = load(b + v * VW);
            for (int r = 0; r < MR; ++r) {
                float ar = rows[r][k];
                for (int v = 0; v < NVT; ++v) acc[r][v] += ar * bv[v];
            }
            b += NR;
        }
    }
    if (mr == MR && nr == NVT * VW) {
        // a whole tile: the bounds are known at compile time and the activation is picked once,
        // outside the loops, so that for the common ones the accumulators stay in registers
        // (with the run-time bounds and activation of store_edge, every tile spilled them: 4-11 %
        // of the GEMM layers' time on AVX2, 35 % on a K = 64 1x1 layer)
        if (!last || e.act == Activation::linear)
            return finish_tile<NVT>(acc, C, ldc, e, row0, first, last, [](vec x) { return x; });
        if (e.act == Activation::leaky)
            return finish_tile<NVT>(acc, C, ldc, e, row0, first, last,
                                    [](vec x) { return activate(x, Activation::leaky); });
        const Activation act = e.act;
        return finish_tile<NVT>(acc, C, ldc, e, row0, first, last, [act](vec x) { return activate(x, act); });
    }
    store_edge<NVT>(acc, C, ldc, mr, nr, e, row0, first, last);
}

// The tile of as many vectors as the nr columns need (nr <= NR): NV for a full panel, fewer for a
// panel at the right edge of C.
template <int NVT = NV>
inline void tile(int kc, const float* __restrict a, long lda, const float* __restrict b, float* C, long ldc, int mr,
                 int nr, const Epilogue& e, int row0, bool first, bool last) {
    if constexpr (NVT > 1) {
        if (nr <= (NVT - 1) * VW) return tile<NVT - 1>(kc, a, lda, b, C, ldc, mr, nr, e, row0, first, last);
    }
    tile_nv<NVT>(kc, a, lda, b, C, ldc, mr, nr, e, row0, first, last);
}

}  // namespace simd
}  // namespace DARKNET_ISA
}  // namespace dn
