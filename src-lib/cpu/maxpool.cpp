#include "maxpool.h"

#include <algorithm>
#include <cfloat>
#include <vector>

#include "simd.h"
#include "thread_pool.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

namespace {

using simd::vec;
using simd::VW;

// a < b ? b : a, as the general loop's std::max(best, v): `a` is kept when `b` is NaN, so NaN
// inputs are skipped (the running max starts at -FLT_MAX and never becomes NaN).
inline float larger(float a, float b) { return a < b ? b : a; }
inline vec larger(vec a, vec b) { return a < b ? b : a; }

// t[x] = max(-FLT_MAX, row_0[x], ..., row_{rows-1}[x]) for x in [c0, c1): the column maxima of one
// output row's window rows. Contiguous loads, the rows streamed side by side.
void column_max(const float* first_row, long row_stride, int rows, int c0, int c1, float* t) {
    const vec floor = simd::splat(-FLT_MAX);
    int x = c0;
    for (; x + VW <= c1; x += VW) {
        const float* p = first_row + x;
        vec m = floor;
        for (int r = 0; r < rows; ++r, p += row_stride) m = larger(m, simd::load(p));
        simd::store(t + x, m);
    }
    for (; x < c1; ++x) {
        const float* p = first_row + x;
        float m = -FLT_MAX;
        for (int r = 0; r < rows; ++r, p += row_stride) m = larger(m, *p);
        t[x] = m;
    }
}

// out[i] = max(t[i*s + kx], 0 <= kx < k) for i in [0, n), every window inside t. The column maxima
// are finite or -FLT_MAX (never NaN), so the order of the comparisons does not matter.
void window_max(const float* t, int k, int s, int n, float* out) {
    if (s == 1) {  // overlapping windows: k shifted vector loads per output vector
        int i = 0;
        for (; i + VW <= n; i += VW) {
            vec m = simd::load(t + i);
            for (int kx = 1; kx < k; ++kx) m = larger(m, simd::load(t + i + kx));
            simd::store(out + i, m);
        }
        for (; i < n; ++i) {
            float m = t[i];
            for (int kx = 1; kx < k; ++kx) m = larger(m, t[i + kx]);
            out[i] = m;
        }
        return;
    }
    if (s == 2 && k == 2) {  // the common downsampling pool; the compiler vectorizes it (even/odd lanes)
        for (int i = 0; i < n; ++i) out[i] = larger(t[2 * i], t[2 * i + 1]);
        return;
    }
    for (int i = 0; i < n; ++i) {
        const float* p = t + (long)i * s;
        float m = p[0];
        for (int kx = 1; kx < k; ++kx) m = larger(m, p[kx]);
        out[i] = m;
    }
}

// The max over the part of window [x0, x0 + k) inside [0, w); -FLT_MAX when none is.
float clipped_window_max(const float* t, int x0, int k, int w) {
    int kx0 = std::max(0, -x0), kx1 = std::min(k, w - x0);
    float m = -FLT_MAX;
    for (int kx = kx0; kx < kx1; ++kx) m = larger(m, t[x0 + kx]);
    return m;
}

// One channel plane (h x w) into its pooled plane (oh x ow); t: scratch of w floats.
void pool_plane(const float* src, int h, int w, float* dst, int oh, int ow, const PoolGeom& g, float* t) {
    const int k = g.size, sx = g.stride_x, sy = g.stride_y, off = -g.padding / 2;
    // the columns some window reads
    const int c0 = std::max(0, off), c1 = std::min(w, (ow - 1) * sx + off + k);
    // outputs whose window lies inside [0, w): ox in [ox_lo, ox_hi); the rest clip theirs
    const int ox_lo = std::min(ow, off >= 0 ? 0 : (-off + sx - 1) / sx);
    const int ox_hi = std::max(ox_lo, w - k - off >= 0 ? std::min(ow, (w - k - off) / sx + 1) : 0);
    for (int oy = 0; oy < oh; ++oy) {
        float* out = dst + (long)oy * ow;
        const int y0 = oy * sy + off;
        const int ky0 = std::max(0, -y0), ky1 = std::min(k, h - y0);
        if (ky1 <= ky0) {  // the window holds only padding
            std::fill(out, out + ow, -FLT_MAX);
            continue;
        }
        column_max(src + (long)(y0 + ky0) * w, w, ky1 - ky0, c0, c1, t);
        for (int ox = 0; ox < ox_lo; ++ox) out[ox] = clipped_window_max(t, ox * sx + off, k, w);
        if (ox_hi > ox_lo) window_max(t + (long)ox_lo * sx + off, k, sx, ox_hi - ox_lo, out + ox_lo);
        for (int ox = ox_hi; ox < ow; ++ox) out[ox] = clipped_window_max(t, ox * sx + off, k, w);
    }
}

}  // namespace

void maxpool_forward(const Tensor& x, const PoolGeom& g, Tensor& y) {
    const Shape &xs = x.shape(), &ys = y.shape();
    if (ys.h <= 0 || ys.w <= 0) return;
    ThreadPool::instance().parallel_for((size_t)ys.n * ys.c, [&](size_t begin, size_t end) {
        std::vector<float> t((size_t)xs.w);
        for (size_t nc = begin; nc < end; ++nc)
            pool_plane(x.data() + nc * xs.plane(), xs.h, xs.w, y.data() + nc * ys.plane(), ys.h, ys.w, g, t.data());
    });
}

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
