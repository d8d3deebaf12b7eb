// GEMM and col2im: the matrix half of convolution training (device kernels only).
#pragma once
#include "args_training.h"

// Row-major C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, with element offsets so that one
// buffer can hold a batch of matrices. One group of 256 threads per 16x16 tile of C (a 1-D grid of
// ceil(M/16) * tiles_n groups), one thread per C element; 16x16 slices of op(A) and op(B) are staged
// in threadgroup memory. Every thread loads and reaches every barrier, also outside C (it loads
// zeros there), and only the write is guarded.
KERNEL(gemm_f32)(KCBUF(float, A, 0), KCBUF(float, B, 1), KBUF(float, C, 2), KARGS(GemmArgs, a, 3) KTHREAD_IDS) {
    // Rows padded to 17 floats: the transposed loads store a column per thread row, and 16 would
    // put all 16 of them in one bank.
    KSHARED float as[16 * 17];  // as[r * 17 + k] = op(A)[row0 + r, k0 + k]
    KSHARED float bs[16 * 17];  // bs[k * 17 + c] = op(B)[k0 + k, col0 + c]
    int ty = (int)(KLID / 16), tx = (int)(KLID % 16);
    int row0 = (int)(KGROUP / (uint)a.tiles_n) * 16, col0 = (int)(KGROUP % (uint)a.tiles_n) * 16;
    float sum = 0.0f;
    for (int k0 = 0; k0 < a.K; k0 += 16) {
        // Consecutive tx read consecutive addresses in both layouts (coalesced): for a transposed
        // operand the thread's (ty, tx) roles swap and it stores the element transposed.
        if (!a.trans_a) {  // op(A)[r, k] = A[r * lda + k]
            int r = row0 + ty, k = k0 + tx;
            as[ty * 17 + tx] = (r < a.M && k < a.K) ? A[a.a_offset + r * a.lda + k] : 0.0f;
        } else {  // op(A)[r, k] = A[k * lda + r]
            int r = row0 + tx, k = k0 + ty;
            as[tx * 17 + ty] = (r < a.M && k < a.K) ? A[a.a_offset + k * a.lda + r] : 0.0f;
        }
        if (!a.trans_b) {  // op(B)[k, c] = B[k * ldb + c]
            int k = k0 + ty, c = col0 + tx;
            bs[ty * 17 + tx] = (k < a.K && c < a.N) ? B[a.b_offset + k * a.ldb + c] : 0.0f;
        } else {  // op(B)[k, c] = B[c * ldb + k]
            int k = k0 + tx, c = col0 + ty;
            bs[tx * 17 + ty] = (k < a.K && c < a.N) ? B[a.b_offset + c * a.ldb + k] : 0.0f;
        }
        KBARRIER();
        for (int k = 0; k < 16; ++k) sum += as[ty * 17 + k] * bs[k * 17 + tx];
        KBARRIER();  // the next slice overwrites the tiles
    }
    int r = row0 + ty, c = col0 + tx;
    if (r < a.M && c < a.N) {
        int i = a.c_offset + r * a.ldc + c;
        // beta == 0 must not read C: it may hold garbage (NaN * 0 is NaN).
        C[i] = (a.beta == 0.0f ? 0.0f : a.beta * C[i]) + a.alpha * sum;
    }
}

// dx += col2im(col) for a run of images: the adjoint of im2col as a gather. One thread per image
// element (image, c, iy, ix) sums every column-matrix entry that im2col copied from it: the (ky, kx)
// taps with oy * stride_y - pad + ky * dilation == iy (and likewise for x) at an output position
// inside the output. Each dx element has one writer, so no atomics. n = images * channels * height *
// width threads.
KERNEL(col2im_f32)(KCBUF(float, col, 0), KBUF(float, dx, 1), KARGS(Col2imArgs, a, 2) KTHREAD_IDS) {
    uint t = KGID;
    if (t >= (uint)a.n) return;
    uint per_image = (uint)(a.channels * a.height * a.width);
    int image = (int)(t / per_image);
    uint i = t % per_image;
    int ix = (int)(i % (uint)a.width), iy = (int)((i / (uint)a.width) % (uint)a.height);
    int c = (int)(i / (uint)(a.width * a.height));
    int out_plane = a.out_h * a.out_w;
    int span = out_plane * a.images;  // one row of the column matrix
    float sum = 0.0f;
    for (int ky = 0; ky < a.kh; ++ky) {
        // ty = oy * stride_y for the output row that reads iy (stride 1, the common case, needs no
        // division: integer divisions dominated this kernel on the H100)
        int ty = iy + a.pad - ky * a.dilation;
        if (ty < 0) continue;
        int oy = a.stride_y == 1 ? ty : ty / a.stride_y;
        if (oy * a.stride_y != ty || oy >= a.out_h) continue;
        for (int kx = 0; kx < a.kw; ++kx) {
            int tx = ix + a.pad - kx * a.dilation;
            if (tx < 0) continue;
            int ox = a.stride_x == 1 ? tx : tx / a.stride_x;
            if (ox * a.stride_x != tx || ox >= a.out_w) continue;
            int row = (c * a.kh + ky) * a.kw + kx;
            sum += col[a.col_offset + row * span + image * out_plane + oy * a.out_w + ox];
        }
    }
    dx[a.im_offset + image * a.image_stride + (int)i] += sum;
}
