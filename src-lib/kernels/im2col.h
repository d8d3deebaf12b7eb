// im2col: one row of the column matrix per (channel, ky, kx), one column per output pixel.
#pragma once
#include "args.h"
#include "compat_cpu.h"

namespace dn {

// Fills row `row` (= (c * kh + ky) * kw + kx) of the column matrix.
KFN void im2col_row(uint row, KGLOBAL const float* im, KGLOBAL float* col, KCONST Im2colArgs& a) {
    int kx = row % a.kw, ky = (row / a.kw) % a.kh, c = row / (a.kw * a.kh);
    KGLOBAL const float* src = im + (size_t)c * a.height * a.width;
    KGLOBAL float* dst = col + (size_t)row * a.out_h * a.out_w;
    for (int oy = 0; oy < a.out_h; ++oy) {
        int iy = oy * a.stride_y - a.pad + ky * a.dilation;
        KGLOBAL float* d = dst + (size_t)oy * a.out_w;
        if (iy < 0 || iy >= a.height) {
            for (int ox = 0; ox < a.out_w; ++ox) d[ox] = 0.0f;
            continue;
        }
        KGLOBAL const float* s = src + (size_t)iy * a.width;
        for (int ox = 0; ox < a.out_w; ++ox) {
            int ix = ox * a.stride_x - a.pad + kx * a.dilation;
            d[ox] = (ix >= 0 && ix < a.width) ? s[ix] : 0.0f;
        }
    }
}

}  // namespace dn
