// col2im: the adjoint of im2col for convolution training (device kernels only; the GEMM and im2col
// are in storage_kernels.h).
#pragma once
#include "args_training.h"

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
