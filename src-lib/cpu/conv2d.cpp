#include "conv2d.h"

#include <algorithm>
#include <cstring>

#include "gemm_driver.h"
#include "thread_pool.h"
#include "winograd.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

namespace {

// The input with its zero border made explicit, so that packing B needs no bounds checks: tap
// (ky, kx) of output pixel (oy, ox) reads padded[oy*sy + ky*d][ox*sx + kx*d]. Sized to cover every
// tap, also Darknet's dilated layers whose output size ignores the dilation (taps past the image
// read zeros there too).
struct Padded {
    const float* data;
    int hp, wp;
    long plane, image;  // floats per channel plane, per image
};

// Floats of slack before and after the padded images: a vector load for one segment of lanes
// (see pack_panel) may reach up to 2 VW floats beyond that segment's own pixels on either side.
constexpr long SLACK = 4 * simd::VW;

bool is_1x1_direct(const ConvGeom& g) {
    return g.kh == 1 && g.kw == 1 && g.stride_x == 1 && g.stride_y == 1 && g.pad == 0;
}

Padded pad_input(const Tensor& x, const ConvGeom& g, int oh, int ow, std::vector<float>& buf) {
    const Shape& s = x.shape();
    // 1x1 stride-1 layers read the image as it is: their B rows are whole channel planes
    if (is_1x1_direct(g)) return {x.data(), s.h, s.w, (long)s.plane(), (long)s.sample()};
    int hp = std::max(s.h + 2 * g.pad, (oh - 1) * g.stride_y + (g.kh - 1) * g.dilation + 1);
    int wp = std::max(s.w + 2 * g.pad, (ow - 1) * g.stride_x + (g.kw - 1) * g.dilation + 1);
    long plane = (long)hp * wp;
    buf.resize((size_t)s.n * s.c * plane + 2 * SLACK);
    std::memset(buf.data(), 0, SLACK * 4);
    std::memset(buf.data() + SLACK + (size_t)s.n * s.c * plane, 0, SLACK * 4);
    float* out = buf.data() + SLACK;
    const float* in = x.data();
    ThreadPool::instance().parallel_for((size_t)s.n * s.c, [&](size_t b, size_t e) {
        for (size_t nc = b; nc < e; ++nc) {
            float* dst = out + nc * plane;
            const float* src = in + nc * s.plane();
            std::memset(dst, 0, (size_t)g.pad * wp * 4);
            for (int y = 0; y < s.h; ++y) {
                float* row = dst + (long)(y + g.pad) * wp;
                std::memset(row, 0, (size_t)g.pad * 4);
                std::memcpy(row + g.pad, src + (long)y * s.w, (size_t)s.w * 4);
                std::memset(row + g.pad + s.w, 0, (size_t)(wp - g.pad - s.w) * 4);
            }
            std::memset(dst + (long)(s.h + g.pad) * wp, 0, (size_t)(hp - s.h - g.pad) * wp * 4);
        }
    }, 4);
    return {out, hp, wp, plane, (long)s.c * plane};
}

// How one vector of a B panel (VW output pixels) reads a row of B: the pixels fall into segments
// of one output row each, whose taps are sx floats apart in the padded image, so each segment is
// one contiguous load (sx = 1) or two loads and an even-lane shuffle (sx = 2), blended by lane
// mask. Wider strides, or more segments than fit, use a gather.
struct PixelSegments {
    int n = 0;              // segments; 0 = use the gather
    long in[4];             // padded-image offset of local lane 0 for each segment (lane l at in + l*sx)
    simd::ivec mask[4];     // each segment's lanes
};

void map_pixels(int j0, int nvalid, int ow, int sx, int sy, long wp, bool direct, PixelSegments& ps) {
    using namespace simd;
    ps.n = 0;
    if (nvalid < VW || sx > 2) return;
    if (direct) {  // the image itself: consecutive pixels are consecutive floats, across rows too
        ps.n = 1, ps.in[0] = j0, ps.mask[0] = iota() >= 0;
        return;
    }
    const ivec id = iota();
    for (int l = 0; l < VW;) {
        if (ps.n == 4) {
            ps.n = 0;
            return;
        }
        int j = j0 + l, oy = j / ow, ox = j - oy * ow, len = std::min(VW - l, ow - ox);
        ps.in[ps.n] = (long)oy * sy * wp + (long)(ox - l) * sx;
        ps.mask[ps.n] = (id >= l) & (id < l + len);
        ++ps.n;
        l += len;
    }
}

// The rows [k0, k0 + kc) of a B panel whose NV vectors each read one segment (lane l of vector v at
// src + in[v] + l*SX, src the tap's row): the common case (output rows of a multiple of VW pixels,
// or rows longer than a panel). Everything the loop needs is in locals (the packing lambda's
// captures are reloaded from memory after every store, as far as the compiler knows), and
// the tap's source row advances by additions.
//
// The loads of a tap's row miss the caches (a panel reads kc rows of the image, ~100 streams, more
// than the hardware prefetchers follow), so each load also prefetches the same row two panels
// ahead (2 * NR * SX floats): the next panels of a GEMM job are the next pixels. Measured on the
// stride-2 layers (yolov4-tiny 1, AVX2): 1 panel ahead gains less, 3 no more.
template <int SX>
void pack_one_segment(const float* img, long plane, long row_step, int d, int kh, int kw, int k0, int kc,
                      const long* in, float* __restrict dst) {
    using namespace simd;
    const int taps = kh * kw;
    int c = k0 / taps, t = k0 - c * taps, ky = t / kw, kx = t - ky * kw;
    const float* row = img + c * plane + ky * row_step;  // the tap's (channel, ky) row, kx = 0
    for (int k = 0; k < kc; ++k, dst += NR) {
        const float* src = row + kx * d;
        for (int v = 0; v < NV; ++v) {
            const float* q = src + in[v];
            __builtin_prefetch(q + 2 * NR * SX);
            vec x;
            if (SX == 1) x = load(q);
            else x = even_lanes(load(q), load(q + VW));
            store(dst + v * VW, x);
        }
        if (++kx == kw) {
            kx = 0;
            row += row_step;
            if (++ky == kh) ky = 0, row += plane - kh * row_step;
        }
    }
}

}  // namespace

void cpu_conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, const float* scale, const float* shift,
                Activation act, Tensor& y, ConvWorkspace& ws, WinogradFilters* kept) {
    using namespace simd;
    const Shape &xs = x.shape(), &ys = y.shape();
    Epilogue e;
    e.scale = scale;
    e.shift = shift;
    e.act = act;
    // The path depends on the shapes and on whether filters can be kept, never on what ran before (the
    // same weights give the same bits); weights that changed since the last call (training) have their
    // filters transformed in the call, in the order that keeps them in L2, with the same bits.
    if (int m = winograd_tile(xs, g, ys, kept != nullptr)) {
        winograd_conv3x3(m, x, w, g, e, y, ws.padded, ws.transformed, kept && kept->steady ? kept : nullptr);
        return;
    }
    const int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
    const int taps = g.kh * g.kw, K = cin_g * taps, N = ys.h * ys.w, ow = ys.w;
    const Padded p = pad_input(x, g, ys.h, ys.w, ws.padded);
    const int sy = g.stride_y, sx = g.stride_x, d = g.dilation, kw = g.kw;

    for (int grp = 0; grp < g.groups; ++grp) {
        const float* img0 = p.data + (long)grp * cin_g * p.plane;
        // B_b[k][j]: k = (channel, ky, kx), j = output pixel (oy, ox)
        const bool direct = is_1x1_direct(g);
        auto pack_b = [&](int b, int k0, int kc, int j0, int nr, float* dst) {
            const float* img = img0 + b * p.image;
            PixelSegments seg[NV];
            alignas(64) int base[NR];
            for (int v = 0; v < NV; ++v) map_pixels(j0 + v * VW, nr - v * VW, ow, sx, sy, p.wp, direct, seg[v]);
            bool one_segment = true;
            long in[NV];
            for (int v = 0; v < NV; ++v)
                if ((one_segment = one_segment && seg[v].n == 1)) in[v] = seg[v].in[0];
            if (one_segment) {
                if (sx == 1) pack_one_segment<1>(img, p.plane, (long)d * p.wp, d, g.kh, kw, k0, kc, in, dst);
                else pack_one_segment<2>(img, p.plane, (long)d * p.wp, d, g.kh, kw, k0, kc, in, dst);
                return;
            }
            for (int jj = 0; jj < NR; ++jj) {
                int j = j0 + std::min(jj, nr - 1);  // columns past nr repeat the last one: finite, never stored
                int oy = j / ow, ox = j - oy * ow;
                base[jj] = direct ? j : oy * sy * p.wp + ox * sx;
            }
            int c = k0 / taps, t = k0 - c * taps, ky = t / kw, kx = t - ky * kw;
            for (int k = 0; k < kc; ++k) {
                const float* src = img + c * p.plane + (long)ky * d * p.wp + kx * d;
                float* o = dst + (size_t)k * NR;
                for (int v = 0; v < NV; ++v) {
                    const PixelSegments& ps = seg[v];
                    vec x;
                    if (ps.n == 0) {
                        x = gather(src, base + v * VW);
                    } else if (sx == 1) {
                        x = load(src + ps.in[0]);
                        for (int q = 1; q < ps.n; ++q) x = ps.mask[q] ? load(src + ps.in[q]) : x;
                    } else {
                        x = even_lanes(load(src + ps.in[0]), load(src + ps.in[0] + VW));
                        for (int q = 1; q < ps.n; ++q)
                            x = ps.mask[q] ? even_lanes(load(src + ps.in[q]), load(src + ps.in[q] + VW)) : x;
                    }
                    store(o + v * VW, x);
                }
                if (++kx == kw) {
                    kx = 0;
                    if (++ky == g.kh) ky = 0, ++c;
                }
            }
        };
        Epilogue eg = e;  // rows of this group's C are channels grp*cout_g + row
        if (scale) eg.scale = scale + (size_t)grp * cout_g;
        if (shift) eg.shift = shift + (size_t)grp * cout_g;
        // the weights [cout][cin*kh*kw] are A as they are (no packing pass: see simd::tile)
        gemm_driver(xs.n, cout_g, N, K, w.data() + (size_t)grp * cout_g * K, K, pack_b, y.data() + (size_t)grp * cout_g * N,
                    (long)ys.c * N, N, eg);
    }
}

}  // namespace DARKNET_ISA
}  // namespace dn
