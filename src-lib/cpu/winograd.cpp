#include "winograd.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "thread_pool.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

namespace {

using namespace simd;

// Transform matrices (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks"): output
// Y = AT [(G g GT) . (BT d B)] A for a 3x3 filter g and an (m+2)^2 input tile d, correlation form.
template <int M>
struct Wino;

template <>
struct Wino<2> {
    static constexpr int A = 4;
    static constexpr float BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
    static constexpr float G[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
    static constexpr float AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
};

template <>
struct Wino<4> {
    static constexpr int A = 6;
    static constexpr float BT[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                                       {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
    static constexpr float G[6][3] = {{1.0f / 4, 0, 0},
                                      {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                                      {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                                      {1.0f / 24, 1.0f / 12, 1.0f / 6},
                                      {1.0f / 24, -1.0f / 12, 1.0f / 6},
                                      {0, 0, 1}};
    static constexpr float AT[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
};

// out[a] = sum_i T[a][i] * in[i], unrolled so that the zero and unit coefficients fold away.
// (Written for simd::vec, not a template parameter: deducing one from vec would drop vec's
// 4-byte alignment attribute, and GCC 13 then emits aligned loads on unaligned stack slots.)
template <int R, int C>
inline void apply(const float (&T)[R][C], const vec* in, int in_stride, vec* out, int out_stride) {
#pragma GCC unroll 8
    for (int a = 0; a < R; ++a) {
        vec s{};
#pragma GCC unroll 8
        for (int i = 0; i < C; ++i)
            if (T[a][i] == 1.0f) s += in[i * in_stride];
            else if (T[a][i] == -1.0f) s -= in[i * in_stride];
            else if (T[a][i] != 0.0f) s += T[a][i] * in[i * in_stride];
        out[a * out_stride] = s;
    }
}

// Strides between the (m+2)^2 planes of the transformed filters and inputs are padded by one
// cache line: unpadded they are multiples of 4 KiB for the usual channel counts, and the 16 or
// 36 streams written at once would all map to the same L1 sets (4K aliasing), costing 2-3x.
constexpr long PLANE_PAD = 16;

// U[xi][r][ci] = (G g GT)[xi] for the filters of output channels co0 .. co0+rows, planes ustride
// apart, rows cin apart (the A operand of simd::tile with lda = cin). Vectorised over 16 input
// channels at a time (their 3x3 filters are 9 floats apart: gathered).
template <int M>
void transform_filters(const float* w, int cin, int co0, int rows, float* U, long ustride) {
    constexpr int A = Wino<M>::A;
    alignas(64) int idx[VW];
    for (int l = 0; l < VW; ++l) idx[l] = 9 * l;
    for (int r = 0; r < rows; ++r)
        for (int c0 = 0; c0 < cin; c0 += VW) {
            int n = std::min(VW, cin - c0);
            const float* src = w + ((long)(co0 + r) * cin + c0) * 9;
            vec g[9], t[A * 3], u[A * A];
            if (n == VW) {
                for (int k = 0; k < 9; ++k) g[k] = gather(src + k, idx);
            } else {
                for (int k = 0; k < 9; ++k) {
                    g[k] = vec{};
                    for (int l = 0; l < n; ++l) g[k][l] = src[9 * l + k];
                }
            }
            for (int j = 0; j < 3; ++j) apply(Wino<M>::G, g + j, 3, t + j, 3);      // t = G g    (A x 3)
            for (int a = 0; a < A; ++a) apply(Wino<M>::G, t + 3 * a, 1, u + A * a, 1);  // u = t GT (A x A)
            float* dst = U + (long)r * cin + c0;
            for (int x = 0; x < A * A; ++x) store_n(dst + x * ustride, u[x], n);
        }
}

// The lanes of one vector hold VW consecutive tiles (in batch, row, column order), which fall
// into a few segments of one tile row each: a segment's lanes read their inputs with one
// contiguous load from the column-phase-split input (see split_input) and write their outputs
// with one contiguous masked store per output row, so neither side needs gathers or scatters.
struct Segment {
    long in;   // split-input offset (channel 0) such that lane l reads in + offset(i, j) + l
    long out;  // output offset (channel 0) such that interleaved output element e lands at out + i*ow + e
    int lo, hi;  // lanes [lo, hi)
    int rows;    // valid output rows of these tiles (fewer in the last tile row)
    int emax;    // interleaved elements past emax fall beyond the right edge of the output
    ivec mask;   // lanes [lo, hi)
};

struct VecMap {
    int nseg = 0;
    Segment seg[VW];
};

struct Tiling {
    int m, th, tw, tiles, oh, ow, cin, cout;
    int hp, u;          // split input: rows per channel, tiles per row (+1)
    long in_plane, in_image, out_plane, out_image;
    long vstride;  // floats between planes of V (cin * NR + PLANE_PAD)
};

// split[img][c][y][q][u] = padded input at row y, column u*m + q: the columns a lane reads are
// m apart in the image but consecutive here.
void split_input(const Tensor& x, const ConvGeom& g, const Tiling& L, float* split) {
    const Shape& xs = x.shape();
    const int m = L.m, U = L.u;
    ThreadPool::instance().parallel_for((size_t)xs.n * xs.c, [&](size_t b, size_t e) {
        for (size_t nc = b; nc < e; ++nc) {
            const float* src = x.data() + nc * xs.plane();
            float* dst = split + nc * L.in_plane;
            for (int y = 0; y < L.hp; ++y) {
                int sy = y - g.pad;
                float* row = dst + (long)y * m * U;
                if (sy < 0 || sy >= xs.h) {
                    std::memset(row, 0, (size_t)m * U * 4);
                    continue;
                }
                const float* s = src + (long)sy * xs.w;
                for (int q = 0; q < m; ++q) {
                    float* d = row + q * U;
                    // column x = u*m + q - pad lies in [0, w) for u in [u0, u1)
                    int u0 = std::max(0, (g.pad - q + m - 1) / m), u1 = std::min(U, (xs.w + g.pad - q + m - 1) / m);
                    if (u1 < u0) u1 = u0;
                    for (int u = 0; u < u0; ++u) d[u] = 0.0f;
                    const float* sq = s + q - g.pad;
                    for (int u = u0; u < u1; ++u) d[u] = sq[u * m];
                    for (int u = u1; u < U; ++u) d[u] = 0.0f;
                }
            }
        }
    }, 2);
}

void map_vector(const Tiling& L, int t0, VecMap& vm) {
    const int per_image = L.th * L.tw;
    const ivec id = iota();
    vm.nseg = 0;
    int l = 0;
    while (l < VW && t0 + l < L.tiles) {
        int t = t0 + l, img = t / per_image, r = t - img * per_image, ty = r / L.tw, tx = r - ty * L.tw;
        int n = std::min({VW - l, L.tw - tx, L.tiles - t});
        Segment& s = vm.seg[vm.nseg++];
        s.lo = l, s.hi = l + n;
        s.in = img * L.in_image + (long)ty * L.m * L.m * L.u + tx - l;
        s.out = img * L.out_image + (long)ty * L.m * L.ow + (long)(tx - l) * L.m;
        s.rows = std::min(L.m, L.oh - ty * L.m);
        s.emax = l * L.m + (L.ow - tx * L.m);
        s.mask = (id >= s.lo) & (id < s.hi);
        l += n;
    }
}

// V[xi][c][lane] = (BT d B)[xi] for one vector of tiles, every input channel.
template <int M>
void transform_inputs(const float* split, const Tiling& L, const VecMap& vm, float* V) {
    constexpr int A = Wino<M>::A;
    const long xi_stride = L.vstride;
    for (int c = 0; c < L.cin; ++c) {
        const float* src = split + c * L.in_plane;
        vec d[A * A], t[A * A];
        for (int i = 0; i < A; ++i)
            for (int j = 0; j < A; ++j) {
                long off = ((long)i * M + j % M) * L.u + j / M;
                vec x = load(src + vm.seg[0].in + off);
                for (int k = 1; k < vm.nseg; ++k) x = vm.seg[k].mask ? load(src + vm.seg[k].in + off) : x;
                d[i * A + j] = x;
            }
        for (int j = 0; j < A; ++j) apply(Wino<M>::BT, d + j, A, t + j, A);      // t = BT d
        for (int a = 0; a < A; ++a) apply(Wino<M>::BT, t + A * a, 1, d + A * a, 1);  // d = t B
        float* dst = V + (long)c * NR;
        for (int x = 0; x < A * A; ++x) store(dst + x * xi_stride, d[x]);
    }
}

// Lane picks that interleave two vectors lane by lane (a0 b0 a1 b1 ...: ZipLo from their first
// halves, ZipHi from their second), and the same for pairs of lanes (a0 a1 b0 b1 ...).
struct ZipLo {
    static constexpr int lane(int e) { return (e % 2 ? VW : 0) + e / 2; }
};
struct ZipHi {
    static constexpr int lane(int e) { return ZipLo::lane(e) + VW / 2; }
};
struct ZipPairsLo {
    static constexpr int lane(int e) { return (e / 2 % 2 ? VW : 0) + 2 * (e / 4) + e % 2; }
};
struct ZipPairsHi {
    static constexpr int lane(int e) { return ZipPairsLo::lane(e) + VW / 2; }
};

// o[0..M) (lanes = tiles) -> M*VW floats in output order: element l*M + j = o[j][l].
template <int M>
inline void interleave(const vec* o, vec* out) {
    if constexpr (M == 2) {
        out[0] = shuffle<ZipLo>(o[0], o[1]);
        out[1] = shuffle<ZipHi>(o[0], o[1]);
    } else {
        vec ab0 = shuffle<ZipLo>(o[0], o[1]), ab1 = shuffle<ZipHi>(o[0], o[1]);
        vec cd0 = shuffle<ZipLo>(o[2], o[3]), cd1 = shuffle<ZipHi>(o[2], o[3]);
        out[0] = shuffle<ZipPairsLo>(ab0, cd0);
        out[1] = shuffle<ZipPairsHi>(ab0, cd0);
        out[2] = shuffle<ZipPairsLo>(ab1, cd1);
        out[3] = shuffle<ZipPairsHi>(ab1, cd1);
    }
}

// y = epilogue(AT m A) for output channels co0..co0+mr of one vector of tiles, from the products
// mt[xi][r][lane] (rows r of the register tile, lanes of this vector at column offset col).
template <int M>
void transform_outputs(const float* mt, int col, const Tiling& L, const VecMap& vm, int co0, int mr,
                       const Epilogue& e, float* y) {
    constexpr int A = Wino<M>::A;
    const bool affine = e.shift != nullptr;
    for (int r = 0; r < mr; ++r) {
        int co = co0 + r;
        float k = affine && e.scale ? e.scale[co] : 1.0f, s = affine ? e.shift[co] : 0.0f;
        float* yc = y + co * L.out_plane;
        vec m[A * A], t[M * A], o[M * M];
        for (int x = 0; x < A * A; ++x) m[x] = load(mt + ((long)x * MR + r) * NR + col);
        for (int j = 0; j < A; ++j) apply(Wino<M>::AT, m + j, A, t + j, A);  // t = AT m   (M x A)
        for (int i = 0; i < M; ++i) apply(Wino<M>::AT, t + A * i, 1, o + M * i, 1);  // o = t A
        for (int x = 0; x < M * M; ++x) {
            if (affine) o[x] = o[x] * k + s;
            if (e.act != Activation::linear) o[x] = activate(o[x], e.act);
        }
        for (int i = 0; i < M; ++i) {
            vec row[M];
            interleave<M>(o + M * i, row);
            for (int sgi = 0; sgi < vm.nseg; ++sgi) {
                const Segment& sg = vm.seg[sgi];
                if (i >= sg.rows) continue;
                float* dst = yc + sg.out + (long)i * L.ow;
                int e0 = sg.lo * M, e1 = std::min(sg.hi * M, sg.emax);
                for (int v = 0; v < M; ++v) {
                    int lo = std::max(e0 - v * VW, 0), hi = std::min(e1 - v * VW, VW);
                    if (lo < hi) store_lanes(dst + v * VW, row[v], lo, hi);
                }
            }
        }
    }
}

// Input transform of tile panel q (NV vectors of tiles) into V (planes L.vstride apart).
template <int M>
void transform_panel(const float* split, const Tiling& L, int q, float* V, VecMap* vm) {
    constexpr int XI = Wino<M>::A * Wino<M>::A;
    for (int v = 0; v < NV; ++v) {
        map_vector(L, q * NR + v * VW, vm[v]);
        if (vm[v].nseg) transform_inputs<M>(split, L, vm[v], V + v * VW);
        else  // lanes past the last tile: zeros keep the products finite
            for (int xi = 0; xi < XI; ++xi)
                for (int c = 0; c < L.cin; ++c) store(V + xi * L.vstride + (long)c * NR + v * VW, vec{});
    }
}

// The products of output channels co0..co0+mr (filters U, planes ustride apart) with one tile
// panel (V), then the output transform with the epilogue.
template <int M>
void multiply_panel(const float* U, long ustride, const float* V, const Tiling& L, const VecMap* vm, int co0, int mr,
                    const Epilogue& e, float* y) {
    constexpr int XI = Wino<M>::A * Wino<M>::A;
    thread_local std::vector<float> mbuf;
    mbuf.resize((size_t)XI * MR * NR);
    Epilogue plain;  // the products are written as they are; the epilogue runs in the output transform
    for (int xi = 0; xi < XI; ++xi)
        tile(L.cin, U + xi * ustride, L.cin, V + xi * L.vstride, mbuf.data() + (long)xi * MR * NR, NR, mr, NR, plain,
             0, true, true);
    for (int v = 0; v < NV; ++v)
        if (vm[v].nseg) transform_outputs<M>(mbuf.data(), v * VW, L, vm[v], co0, mr, e, y);
}

// Two orders, by which transformed operand is the smaller: with many tiles (large images) the
// filters are transformed once up front and each job transforms one tile panel's inputs; with
// few tiles and many channels (small images) the inputs are transformed once up front and each
// job transforms the filters of MR output channels, which then stay in L2 (transforming every
// filter up front would stream (m+2)^2/9 times the weights through memory on every call).
// With kept filters (a layer whose weights stay as they are between calls: inference) every filter is
// transformed once into kept->u, and both orders read their filters from there.
template <int M>
void run(const Tensor& x, const Tensor& w, const ConvGeom& g, const Epilogue& e, Tensor& y, std::vector<float>& splitbuf,
         std::vector<float>& tbuf, WinogradFilters* kept) {
    constexpr int A = Wino<M>::A, XI = A * A;
    const Shape &xs = x.shape(), &ys = y.shape();
    Tiling L;
    L.m = M, L.oh = ys.h, L.ow = ys.w, L.cin = xs.c, L.cout = ys.c;
    L.th = (ys.h + M - 1) / M, L.tw = (ys.w + M - 1) / M, L.tiles = xs.n * L.th * L.tw;
    L.hp = L.th * M + 2, L.u = L.tw + 1;
    L.in_plane = (long)L.hp * M * L.u, L.in_image = (long)xs.c * L.in_plane;
    L.out_plane = (long)ys.h * ys.w, L.out_image = (long)ys.c * L.out_plane;
    L.vstride = (long)L.cin * NR + PLANE_PAD;
    // + 2 VW: a segment's load may run past its own lanes (those lanes are blended away)
    splitbuf.resize((size_t)xs.n * L.in_image + 2 * VW);
    split_input(x, g, L, splitbuf.data());
    const float* split = splitbuf.data();
    const int panels = (L.tiles + NR - 1) / NR, m_panels = (L.cout + MR - 1) / MR;
    ThreadPool& pool = ThreadPool::instance();
    const int want = pool.threads() > 1 ? 4 * pool.threads() : 1;
    const long ustride = (long)L.cout * L.cin + PLANE_PAD;  // of every filter transformed (U)
    auto transform_all = [&](float* U) {
        pool.parallel_for((size_t)m_panels, [&](size_t b, size_t en) {
            for (size_t p = b; p < en; ++p) {
                int co0 = (int)p * MR;
                transform_filters<M>(w.data(), L.cin, co0, std::min(MR, L.cout - co0), U + (long)co0 * L.cin, ustride);
            }
        });
    };
    const float* kept_u = nullptr;
    if (kept) {
        if (kept->m != M || kept->u.size() != (size_t)XI * ustride) {
            kept->u.assign((size_t)XI * ustride, 0.0f);
            kept->m = M;
            kept->current = false;
        }
        if (!kept->current) transform_all(kept->u.data());
        kept->current = true;
        kept_u = kept->u.data();
    }

    if ((long)panels * NR >= L.cout) {
        const float* U = kept_u;
        if (!U) {
            tbuf.resize((size_t)XI * ustride);
            transform_all(tbuf.data());
            U = tbuf.data();
        }
        int m_blocks = panels >= want ? 1 : std::min(m_panels, (want + panels - 1) / panels);
        const int mbp = (m_panels + m_blocks - 1) / m_blocks;
        m_blocks = (m_panels + mbp - 1) / mbp;
        pool.run_jobs((size_t)panels * m_blocks, [&](size_t job) {
            thread_local std::vector<float> vbuf;
            int q = (int)(job / m_blocks), mb = (int)(job % m_blocks);
            vbuf.resize((size_t)XI * L.vstride);
            VecMap vm[NV];
            transform_panel<M>(split, L, q, vbuf.data(), vm);
            for (int p = mb * mbp, p1 = std::min(m_panels, (mb + 1) * mbp); p < p1; ++p)
                multiply_panel<M>(U + (long)p * MR * L.cin, ustride, vbuf.data(), L, vm, p * MR,
                                  std::min(MR, L.cout - p * MR), e, y.data());
        });
        return;
    }
    const long pstride = XI * L.vstride;
    tbuf.resize((size_t)panels * pstride);
    float* V = tbuf.data();
    std::vector<VecMap> maps((size_t)panels * NV);
    pool.run_jobs((size_t)panels, [&](size_t q) { transform_panel<M>(split, L, (int)q, V + q * pstride, &maps[q * NV]); });
    pool.run_jobs((size_t)m_panels, [&](size_t p) {
        thread_local std::vector<float> ubuf;
        int co0 = (int)p * MR, mr = std::min(MR, L.cout - co0);
        const float* u = kept_u + (long)co0 * L.cin;
        long us = ustride;
        if (!kept_u) {
            us = (long)MR * L.cin + PLANE_PAD;
            ubuf.resize((size_t)XI * us);
            transform_filters<M>(w.data(), L.cin, co0, mr, ubuf.data(), us);
            u = ubuf.data();
        }
        for (int q = 0; q < panels; ++q)
            multiply_panel<M>(u, us, V + q * pstride, L, &maps[(size_t)q * NV], co0, mr, e, y.data());
    });
}

}  // namespace

int winograd_tile(const Shape& x, const ConvGeom& g, const Shape& y, bool filters_kept) {
    if (g.kh != 3 || g.kw != 3 || g.stride_x != 1 || g.stride_y != 1 || g.dilation != 1 || g.groups != 1) return 0;
    if (y.h != x.h + 2 * g.pad - 2 || y.w != x.w + 2 * g.pad - 2 || g.pad > 2) return 0;
    // read on every call (a getenv per layer is nothing next to a convolution), so tests can switch
    if (const char* force = std::getenv("DARKNET_PY_CONV_PATH")) {
        if (!std::strcmp(force, "gemm")) return 0;
        if (!std::strcmp(force, "winograd-f2")) return 2;
        if (!std::strcmp(force, "winograd-f4")) return 4;
    }
    if (x.c < 8 || y.c < 8) return 0;
    // Estimated cost in multiply-add lanes of the register tile, fitted to single-thread timings on
    // an AVX-512 machine (Zen 5) for 13x13 .. 208x208 layers of 16 .. 512 channels (within ~15%):
    // the direct GEMM pads pixels to NR columns, Winograd pads tiles to NR and pays ~10 lanes per
    // transformed input/output value and ~40 per transformed filter value.
    auto pad = [](double v) { return std::ceil(v / NR) * NR; };
    const double cin = x.c, cout = y.c, pairs = cin * cout;
    double best = 0.9 * 9.0 * pairs * pad((double)y.n * y.h * y.w);
    int choice = 0;
    for (int m : {2, 4}) {
        double tiles = (double)y.n * ((y.h + m - 1) / m) * ((y.w + m - 1) / m), a2 = (m + 2) * (m + 2);
        double cost = a2 * (pairs * pad(tiles) + 10.0 * tiles * (cin + cout) + (filters_kept ? 0.0 : 40.0) * pairs);
        if (cost < best) best = cost, choice = m;
    }
    return choice;
}

void winograd_conv3x3(int m, const Tensor& x, const Tensor& w, const ConvGeom& g, const Epilogue& e, Tensor& y,
                      std::vector<float>& padded, std::vector<float>& u, WinogradFilters* kept) {
    if (m == 4) run<4>(x, w, g, e, y, padded, u, kept);
    else run<2>(x, w, g, e, y, padded, u, kept);
}

}  // namespace DARKNET_ISA
}  // namespace dn
