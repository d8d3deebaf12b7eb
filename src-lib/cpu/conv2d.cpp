#include "conv2d.h"

#include "../kernels/im2col.h"
#include "gemm.h"
#include "thread_pool.h"

namespace dn {

void cpu_conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, Tensor& y, std::vector<float>& workspace) {
    const Shape &xs = x.shape(), &ys = y.shape();
    int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
    int K = cin_g * g.kh * g.kw, N = ys.h * ys.w;
    bool direct = g.kh == 1 && g.kw == 1 && g.stride_x == 1 && g.stride_y == 1 && g.pad == 0;
    Im2colArgs a{cin_g, xs.h, xs.w, g.kh, g.kw, g.pad, g.stride_y, g.stride_x, g.dilation, ys.h, ys.w};
    if (!direct) workspace.resize((size_t)K * N);
    for (int n = 0; n < xs.n; ++n)
        for (int grp = 0; grp < g.groups; ++grp) {
            const float* im = x.data() + ((size_t)n * xs.c + (size_t)grp * cin_g) * xs.h * xs.w;
            const float* B = im;
            if (!direct) {
                float* col = workspace.data();
                ThreadPool::instance().parallel_for(K, [&](size_t b, size_t e) {
                    for (size_t row = b; row < e; ++row) im2col_row((uint)row, im, col, a);
                });
                B = col;
            }
            const float* W = w.data() + (size_t)grp * cout_g * K;
            float* out = y.data() + ((size_t)n * ys.c + (size_t)grp * cout_g) * N;
            cpu_sgemm(false, false, cout_g, N, K, 1.0f, W, K, B, N, 0.0f, out, N);
        }
}

}  // namespace dn
