#include "training_ops.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "../kernels/im2col.h"
#include "../kernels/optimizer.h"
#include "conv2d.h"
#include "gemm.h"
#include "gemm_driver.h"
#include "shortcut_weights.h"
#include "simd.h"
#include "thread_pool.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

namespace {

// Sums of p[i] - m and of (p[i] - m)^2 over [0, n): vector lanes of floats within blocks of 1024
// elements (vectorised; a double accumulator per element would be one long dependency chain),
// doubles across blocks, so a plane of 43k values keeps double-like accuracy.
void centered_sums(const float* p, size_t n, float m, double& s1, double& s2) {
    using simd::VW;
    const simd::vec mv = simd::splat(m);
    for (size_t b = 0; b < n; b += 1024) {
        size_t e = std::min(n, b + 1024), i = b;
        simd::vec a1{}, a2{};
        for (; i + VW <= e; i += VW) {
            simd::vec d = simd::load(p + i) - mv;
            a1 += d;
            a2 += d * d;
        }
        float t1 = 0, t2 = 0;
        for (int l = 0; l < VW; ++l) t1 += a1[l], t2 += a2[l];
        for (; i < e; ++i) {
            float d = p[i] - m;
            t1 += d, t2 += d * d;
        }
        s1 += t1, s2 += t2;
    }
}

// Sums of a[i] and of a[i] * b[i] over [0, n), blocked as centered_sums.
void dot_sums(const float* a, const float* b, size_t n, double& sa, double& sab) {
    using simd::VW;
    for (size_t blk = 0; blk < n; blk += 1024) {
        size_t e = std::min(n, blk + 1024), i = blk;
        simd::vec a1{}, a2{};
        for (; i + VW <= e; i += VW) {
            simd::vec x = simd::load(a + i);
            a1 += x;
            a2 += x * simd::load(b + i);
        }
        float t1 = 0, t2 = 0;
        for (int l = 0; l < VW; ++l) t1 += a1[l], t2 += a2[l];
        for (; i < e; ++i) t1 += a[i], t2 += a[i] * b[i];
        sa += t1, sab += t2;
    }
}

Im2colArgs im2col_args(const Shape& xs, const Shape& ys, const ConvGeom& g) {
    return Im2colArgs{xs.c / g.groups, xs.h, xs.w, g.kh, g.kw, g.pad, g.stride_y, g.stride_x, g.dilation, ys.h, ys.w};
}

// The output columns ox whose input column ix = ox * stride + off lies inside [0, width): [o0, o1).
// Hoisting the bounds out of the inner loops lets im2col/col2im run branch-free (and vectorised).
inline void valid_range(int off, int stride, int width, int out_w, int& o0, int& o1) {
    o0 = off >= 0 ? 0 : (-off + stride - 1) / stride;
    o1 = width - off <= 0 ? 0 : (width - off - 1) / stride + 1;
    o0 = std::min(o0, out_w);
    o1 = std::max(o0, std::min(o1, out_w));
}

// Column matrix [K = c*kh*kw rows, out_h*out_w columns] of one image (single-threaded: the
// callers run one image per thread).
void im2col_image(const float* im, float* col, const Im2colArgs& a) {
    int rows = a.channels * a.kh * a.kw;
    for (int row = 0; row < rows; ++row) {
        int kx = row % a.kw, ky = (row / a.kw) % a.kh, c = row / (a.kw * a.kh);
        const float* src = im + (size_t)c * a.height * a.width;
        float* dst = col + (size_t)row * a.out_h * a.out_w;
        int off = kx * a.dilation - a.pad, o0, o1;
        valid_range(off, a.stride_x, a.width, a.out_w, o0, o1);
        for (int oy = 0; oy < a.out_h; ++oy) {
            int iy = oy * a.stride_y - a.pad + ky * a.dilation;
            float* d = dst + (size_t)oy * a.out_w;
            if (iy < 0 || iy >= a.height) {
                std::memset(d, 0, sizeof(float) * a.out_w);
                continue;
            }
            const float* s = src + (size_t)iy * a.width + off;
            for (int ox = 0; ox < o0; ++ox) d[ox] = 0.0f;
            if (a.stride_x == 1)
                for (int ox = o0; ox < o1; ++ox) d[ox] = s[ox];
            else
                for (int ox = o0; ox < o1; ++ox) d[ox] = s[(long)ox * a.stride_x];
            for (int ox = o1; ox < a.out_w; ++ox) d[ox] = 0.0f;
        }
    }
}

// Adds the column matrix of one image back into the image (the adjoint of im2col_image).
void col2im_image(const float* col, float* im, const Im2colArgs& a) {
    int rows = a.channels * a.kh * a.kw;
    for (int row = 0; row < rows; ++row) {
        int kx = row % a.kw, ky = (row / a.kw) % a.kh, c = row / (a.kw * a.kh);
        float* dst = im + (size_t)c * a.height * a.width;
        const float* src = col + (size_t)row * a.out_h * a.out_w;
        int off = kx * a.dilation - a.pad, o0, o1;
        valid_range(off, a.stride_x, a.width, a.out_w, o0, o1);
        for (int oy = 0; oy < a.out_h; ++oy) {
            int iy = oy * a.stride_y - a.pad + ky * a.dilation;
            if (iy < 0 || iy >= a.height) continue;
            float* d = dst + (size_t)iy * a.width + off;
            const float* s = src + (size_t)oy * a.out_w;
            if (a.stride_x == 1)
                for (int ox = o0; ox < o1; ++ox) d[ox] += s[ox];
            else
                for (int ox = o0; ox < o1; ++ox) d[(long)ox * a.stride_x] += s[ox];
        }
    }
}

// 1x1, stride 1, no padding: the image already is its column matrix (no im2col / col2im).
bool is_pointwise(const ConvGeom& g) {
    return g.kh == 1 && g.kw == 1 && g.stride_y == 1 && g.stride_x == 1 && g.pad == 0;
}

// The backward convolutions run one image per thread (each image's GEMMs are too small, and their
// im2col/col2im too serial, to share well between threads) with the register tile of the forward
// GEMM called directly, since pool work cannot nest. Returns how many image workers to run.
int image_workers(int batch) {
    return std::max(1, std::min(ThreadPool::instance().threads(), batch));
}

// Runs fn(worker, image) for every image, worker w taking a fixed contiguous range of images: a
// fixed split keeps each worker's partial sums, and so the gradients, the same from run to run.
template <class F>
void for_images(int batch, int workers, F&& fn) {
    ThreadPool::instance().run_jobs((size_t)workers, [&](size_t w) {
        for (int n = (int)(w * batch / workers); n < (int)((w + 1) * batch / workers); ++n) fn((int)w, n);
    });
}

}  // namespace

// dW[cout_g, K] = sum over images of dY[cout_g, N] * col[K, N]^T, computed transposed as
// dW^T[K, cout_g] = col[K, N] * dY^T[N, cout_g]: the tile then reads the column matrix as its
// row-major A (no packing), and only dY^T (cout_g x N, smaller than col's K x N for all but the
// first layers) is transposed into B panels. Each worker accumulates its own dW^T; they are summed and transposed into dW at the end.
void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw, std::vector<float>& ws) {
    using simd::MR;
    using simd::NR;
    const Shape &xs = x.shape(), &ys = dy.shape();
    const int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
    const int K = cin_g * g.kh * g.kw, N = ys.h * ys.w;
    const Im2colArgs a = im2col_args(xs, ys, g);
    const bool direct = is_pointwise(g);
    const int workers = image_workers(xs.n), q_panels = (cout_g + NR - 1) / NR, kcmax = gemm_kc(N);
    const size_t acc_n = (size_t)g.groups * K * cout_g, col_n = direct ? 0 : (size_t)K * N,
                 b_n = (size_t)kcmax * q_panels * NR, per_worker = acc_n + col_n + b_n;
    ws.resize(per_worker * workers);
    for (int w = 0; w < workers; ++w) std::fill(ws.data() + w * per_worker, ws.data() + w * per_worker + acc_n, 0.0f);
    Epilogue acc_e;
    acc_e.beta = 1.0f;  // C += A*B
    for_images(xs.n, workers, [&](int w, int n) {
        float* acc = ws.data() + w * per_worker;
        float* colbuf = acc + acc_n;
        float* bpack = colbuf + col_n;
        for (int grp = 0; grp < g.groups; ++grp) {
            const float* im = x.data() + ((size_t)n * xs.c + (size_t)grp * cin_g) * xs.plane();
            const float* col = im;
            if (!direct) {
                im2col_image(im, colbuf, a);
                col = colbuf;
            }
            const float* d = dy.data() + ((size_t)n * ys.c + (size_t)grp * cout_g) * N;
            float* c = acc + (size_t)grp * K * cout_g;  // dW^T of this group, rows cout_g apart
            for (int k0 = 0; k0 < N; k0 += kcmax) {
                int kc = std::min(kcmax, N - k0);
                for (int q = 0; q < q_panels; ++q) {  // B panel q: dst[k*NR + j] = dY[q*NR + j][k0 + k]
                    float* dst = bpack + (size_t)q * kc * NR;
                    for (int j = 0; j < NR; ++j) {
                        int o = q * NR + j;
                        if (o >= cout_g) {
                            for (int k = 0; k < kc; ++k) dst[k * NR + j] = 0.0f;
                            continue;
                        }
                        const float* src = d + (size_t)o * N + k0;
                        for (int k = 0; k < kc; ++k) dst[k * NR + j] = src[k];
                    }
                }
                for (int p = 0; p < K; p += MR) {
                    int mr = std::min(MR, K - p);
                    for (int q = 0; q < q_panels; ++q)
                        simd::tile(kc, col + (size_t)p * N + k0, N, bpack + (size_t)q * kc * NR,
                                   c + (size_t)p * cout_g + q * NR, cout_g, mr, std::min(NR, cout_g - q * NR), acc_e,
                                   0, true, true);
                }
            }
        }
    });
    // dW[grp][o][k] += sum over workers of acc[grp][k][o]
    parallel_for_each((size_t)g.groups * cout_g, [&](size_t go) {
        size_t grp = go / cout_g, o = go % cout_g;
        float* dst = dw.data() + go * K;
        for (int w = 0; w < workers; ++w) {
            const float* src = ws.data() + w * per_worker + grp * K * cout_g + o;
            for (int k = 0; k < K; ++k) dst[k] += src[(size_t)k * cout_g];
        }
    });
}

// Stride-1 square kernels with (k-1)*dilation >= pad: dX = conv(dY, W') with W' the filters
// flipped in y and x and with input/output channels swapped, padded by (k-1)*dilation - pad (the
// transposed convolution of a stride-1 convolution is a convolution). That runs on the forward
// fast paths (Winograd, implicit GEMM) with no col2im pass; the result is added into dX.
bool backward_data_as_conv(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx) {
    const Shape &xs = dx.shape(), &ys = dy.shape();
    if (g.stride_y != 1 || g.stride_x != 1 || g.kh != g.kw || (g.kh - 1) * g.dilation < g.pad) return false;
    const int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups, kh = g.kh, kw = g.kw;
    static thread_local Tensor flipped, tmp;
    static thread_local ConvWorkspace conv_ws;
    flipped.resize(Shape{xs.c, cout_g, kh, kw});
    for (int grp = 0; grp < g.groups; ++grp)
        for (int co = 0; co < cout_g; ++co)
            for (int ci = 0; ci < cin_g; ++ci)
                for (int ky = 0; ky < kh; ++ky)
                    for (int kx = 0; kx < kw; ++kx)
                        flipped.data()[(((size_t)(grp * cin_g + ci) * cout_g + co) * kh + ky) * kw + kx] =
                            w.data()[(((size_t)(grp * cout_g + co) * cin_g + ci) * kh + kh - 1 - ky) * kw + kw - 1 - kx];
    tmp.resize(xs);
    ConvGeom tg{kh, kw, 1, 1, (kh - 1) * g.dilation - g.pad, g.dilation, g.groups};
    cpu_conv2d(dy, flipped, tg, nullptr, nullptr, Activation::linear, tmp, conv_ws);
    size_t n = dx.size(), block = 16384;
    float* d = dx.data();
    const float* t = tmp.data();  // (tmp is thread_local: the workers must not name it themselves)
    parallel_for_each((n + block - 1) / block, [&](size_t blk) {
        for (size_t i = blk * block, e = std::min(n, i + block); i < e; ++i) d[i] += t[i];
    });
    return true;
}

// col[K, N] = W[cout_g, K]^T * dY[cout_g, N] per image, scattered back into dX by col2im; for 1x1
// stride-1 layers the product is added straight into dX. W^T is packed once for the whole batch.
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx, std::vector<float>& ws) {
    using simd::MR;
    using simd::NR;
    const Shape &xs = dx.shape(), &ys = dy.shape();
    const int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
    const int K = cin_g * g.kh * g.kw, N = ys.h * ys.w;
    const Im2colArgs a = im2col_args(xs, ys, g);
    const bool direct = is_pointwise(g);
    if (!direct && backward_data_as_conv(dy, w, g, dx)) return;
    const int workers = image_workers(xs.n), kcmax = gemm_kc(cout_g), m_panels = (K + MR - 1) / MR;
    const int n_panels = (N + NR - 1) / NR, nbp = std::min(GEMM_NB_PANELS, n_panels);
    const size_t a_n = packed_a_floats(K, cout_g), col_n = direct ? 0 : (size_t)K * N,
                 b_n = (size_t)kcmax * nbp * NR, per_worker = col_n + b_n;
    ws.resize(a_n * g.groups + per_worker * workers);
    float* apack = ws.data();
    for (int grp = 0; grp < g.groups; ++grp)
        pack_a(true, w.data() + (size_t)grp * cout_g * K, K, K, cout_g, apack + grp * a_n);
    Epilogue e;
    e.beta = direct ? 1.0f : 0.0f;  // the direct path adds into dX, which may hold other gradients
    for_images(xs.n, workers, [&](int wk, int n) {
        float* colbuf = ws.data() + a_n * g.groups + wk * per_worker;
        float* bpack = colbuf + col_n;
        for (int grp = 0; grp < g.groups; ++grp) {
            const float* d = dy.data() + ((size_t)n * ys.c + (size_t)grp * cout_g) * N;
            float* im = dx.data() + ((size_t)n * xs.c + (size_t)grp * cin_g) * xs.plane();
            float* out = direct ? im : colbuf;
            const float* ap = apack + grp * a_n;
            for (int q0 = 0; q0 < n_panels; q0 += nbp) {
                int q1 = std::min(n_panels, q0 + nbp);
                for (int k0 = 0; k0 < cout_g; k0 += kcmax) {
                    int kc = std::min(kcmax, cout_g - k0);
                    bool first = k0 == 0, last = k0 + kc == cout_g;
                    for (int q = q0; q < q1; ++q) {  // B panel: rows k0.. of dY, columns q*NR..
                        float* dst = bpack + (size_t)(q - q0) * kc * NR;
                        int j0 = q * NR, nr = std::min(NR, N - j0);
                        for (int k = 0; k < kc; ++k) {
                            const float* src = d + (size_t)(k0 + k) * N + j0;
                            if (nr == NR) std::memcpy(dst + k * NR, src, NR * sizeof(float));
                            else for (int j = 0; j < NR; ++j) dst[k * NR + j] = j < nr ? src[j] : 0.0f;
                        }
                    }
                    for (int p = 0; p < m_panels; ++p) {
                        int mr = std::min(MR, K - p * MR);
                        const float* ak = ap + (size_t)p * MR * cout_g + (size_t)k0 * MR;
                        for (int q = q0; q < q1; ++q)
                            simd::tile(kc, ak, 0, bpack + (size_t)(q - q0) * kc * NR, out + (size_t)p * MR * N + q * NR,
                                       N, mr, std::min(NR, N - q * NR), e, 0, first, last);
                    }
                }
            }
            if (!direct) col2im_image(colbuf, im, a);
        }
    });
}

void bias_backward(const Tensor& dy, float* db) {
    const Shape& s = dy.shape();
    size_t plane = s.plane();
    parallel_for_each(s.c, [&](size_t c) {
        double sum = 0;
        for (int n = 0; n < s.n; ++n) {
            const float* p = dy.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) sum += p[i];
        }
        db[c] += (float)sum;
    });
}

void batchnorm_train(Tensor& y, float* mean, float* var, Tensor& x_norm, const float* scale, const float* bias,
                     float eps) {
    const Shape& s = y.shape();
    size_t plane = s.plane();
    double count = (double)s.n * plane;
    parallel_for_each(s.c, [&](size_t c) {
        // one pass for both moments, around a shift (the channel's first value) close to the mean,
        // so that sum((x - shift)^2) - count * (mean - shift)^2 does not cancel catastrophically
        float shift = y.data()[c * plane];
        double s1 = 0, s2 = 0;
        for (int n = 0; n < s.n; ++n) centered_sums(y.data() + ((size_t)n * s.c + c) * plane, plane, shift, s1, s2);
        double dm = s1 / count, m = shift + dm;
        double v = count > 1 ? std::max(0.0, s2 - s1 * dm) / (count - 1) : 0.0;
        mean[c] = (float)m;
        var[c] = (float)v;
        const float inv = (float)(1.0 / std::sqrt(v + eps)), fm = (float)m, sc = scale[c], bi = bias[c];
        for (int n = 0; n < s.n; ++n) {
            float* p = y.data() + ((size_t)n * s.c + c) * plane;
            float* xn = x_norm.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) {
                float v_ = (p[i] - fm) * inv;
                xn[i] = v_;
                p[i] = v_ * sc + bi;
            }
        }
    });
}

void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const float* scale, const float* var, float eps,
                        float* dscale, float* dbias) {
    const Shape& s = dy.shape();
    size_t plane = s.plane();
    double N = (double)s.n * plane;
    parallel_for_each(s.c, [&](size_t c) {
        double sdy = 0, sdyx = 0;
        for (int n = 0; n < s.n; ++n) {
            size_t off = ((size_t)n * s.c + c) * plane;
            dot_sums(dy.data() + off, x_norm.data() + off, plane, sdy, sdyx);
        }
        dscale[c] += (float)sdyx;
        dbias[c] += (float)sdy;
        const float inv = (float)(1.0 / std::sqrt((double)var[c] + eps)), sc = scale[c];
        const float gmean = (float)(sc * sdy / N), gx = (float)(sc * sdyx / (N > 1 ? N - 1 : 1));
        for (int n = 0; n < s.n; ++n) {
            float* d = dy.data() + ((size_t)n * s.c + c) * plane;
            const float* xn = x_norm.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) d[i] = inv * (sc * d[i] - gmean - xn[i] * gx);
        }
    });
}

void activate_backward(const Tensor& x, Tensor& dy, Activation a) {
    if (a == Activation::linear) return;
    if (activation_is_elementwise(a)) {
        size_t n = dy.size(), block = 4096;
        parallel_for_each((n + block - 1) / block, [&](size_t blk) {
            size_t e = std::min(n, (blk + 1) * block);
            float* d = dy.data();
            const float* xv = x.data();
            if (a == Activation::leaky)  // the common case, written so that it vectorises
                for (size_t i = blk * block; i < e; ++i) d[i] *= xv[i] > 0 ? 1.0f : 0.1f;
            else
                for (size_t i = blk * block; i < e; ++i) d[i] *= activate_gradient(xv[i], a);
        });
        return;
    }
    const Shape& s = x.shape();
    size_t plane = s.plane();
    bool relu_form = a == Activation::normalize_channels;
    parallel_for_each((size_t)s.n * plane, [&](size_t np) {
        size_t n = np / plane, p = np % plane;
        const float* xb = x.data() + n * s.sample() + p;
        float* db = dy.data() + n * s.sample() + p;
        float S = 0.0001f, gy = 0;
        for (int c = 0; c < s.c; ++c) S += relu_form ? std::max(xb[c * plane], 0.0f) : std::exp(xb[c * plane]);
        for (int c = 0; c < s.c; ++c) {
            float f = relu_form ? std::max(xb[c * plane], 0.0f) : std::exp(xb[c * plane]);
            gy += db[c * plane] * f / S;
        }
        for (int c = 0; c < s.c; ++c) {
            float v = xb[c * plane];
            float df = relu_form ? (v > 0 ? 1.0f : 0.0f) : std::exp(v);
            db[c * plane] = df * (db[c * plane] - gy) / S;
        }
    });
}

void pool_backward(bool max, const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    const Shape &xs = x.shape(), &ys = dy.shape();
    int off = -g.padding / 2;
    // one task per (n, c) plane: windows overlap only within a plane, so accumulation is race-free
    parallel_for_each((size_t)ys.n * ys.c, [&](size_t nc) {
        const float* src = x.data() + nc * xs.plane();
        const float* d = dy.data() + nc * ys.plane();
        float* out = dx.data() + nc * xs.plane();
        for (int oy = 0; oy < ys.h; ++oy)
            for (int ox = 0; ox < ys.w; ++ox) {
                int y0 = oy * g.stride_y + off, x0 = ox * g.stride_x + off;
                int ky0 = std::max(0, -y0), ky1 = std::min(g.size, xs.h - y0);
                int kx0 = std::max(0, -x0), kx1 = std::min(g.size, xs.w - x0);
                float grad = d[(size_t)oy * ys.w + ox];
                if (max) {
                    float best = -FLT_MAX;
                    long bi = -1;
                    for (int ky = ky0; ky < ky1; ++ky)
                        for (int kx = kx0; kx < kx1; ++kx) {
                            long i = (long)(y0 + ky) * xs.w + x0 + kx;
                            if (src[i] > best) best = src[i], bi = i;
                        }
                    if (bi >= 0) out[bi] += grad;
                } else {
                    int count = std::max(0, ky1 - ky0) * std::max(0, kx1 - kx0);
                    if (!count) continue;
                    float share = grad / count;
                    for (int ky = ky0; ky < ky1; ++ky)
                        for (int kx = kx0; kx < kx1; ++kx) out[(size_t)(y0 + ky) * xs.w + x0 + kx] += share;
                }
            }
    });
}

void avgpool_global_backward(const Tensor& dy, Tensor& dx) {
    const Shape& s = dx.shape();
    size_t plane = s.plane();
    parallel_for_each((size_t)s.n * s.c, [&](size_t nc) {
        float g = dy.data()[nc] / plane;
        float* p = dx.data() + nc * plane;
        for (size_t i = 0; i < plane; ++i) p[i] += g;
    });
}

void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
    const Shape &xs = x.shape(), &ys = dy.shape();
    size_t plane = xs.plane();
    parallel_for_each((size_t)ys.n * ys.c, [&](size_t nc) {
        size_t n = nc / ys.c;
        int c = (int)(nc % ys.c);
        for (size_t i = 0; i < plane; ++i) {
            float best = -FLT_MAX;
            int bk = -1;
            for (int k = c; k < xs.c; k += ys.c) {
                float v = x.data()[(n * xs.c + k) * plane + i];
                if (v > best) best = v, bk = k;
            }
            if (bk >= 0) dx.data()[(n * xs.c + bk) * plane + i] += dy.data()[nc * plane + i];
        }
    });
}

void add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) {
    const Shape &xs = x.shape(), &ys = y.shape();
    size_t plane = xs.plane();
    parallel_for_each((size_t)xs.n * count, [&](size_t nc) {
        size_t n = nc / count, c = nc % count;
        const float* s = x.data() + (n * xs.c + src_c0 + c) * plane;
        float* d = y.data() + (n * ys.c + dst_c0 + c) * plane;
        for (size_t i = 0; i < plane; ++i) d[i] += s[i];
    });
}

void shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const float* weights,
                       ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                       const std::vector<Tensor*>& dfrom, float* dweights) {
    const Shape& s = x.shape();
    size_t per_sample = s.sample(), plane = s.plane();
    int nin = (int)from.size() + 1;
    int nchan = wt == ShortcutWeights::per_channel ? s.c : 1;
    // normalised weights per channel group (as in the forward); their Jacobian is applied below
    std::vector<float> w, sums;
    normalize_shortcut_weights(weights, wt, norm, nin, nchan, w, sums);
    // dL/d(normalised w) accumulated per (channel group, input), reduced over the batch afterwards
    std::vector<double> dw_norm((size_t)s.c * nin, 0.0);
    parallel_for_each(s.c, [&](size_t c) {
        const float* wc = w.data() + (wt == ShortcutWeights::per_channel ? c * nin : 0);
        size_t off = c * plane;
        for (int n = 0; n < s.n; ++n) {
            const float* d = dy.data() + n * per_sample + off;
            float* ddx = dx.data() + n * per_sample + off;
            const float* xin = x.data() + n * per_sample + off;
            double acc0 = 0;
            for (size_t i = 0; i < plane; ++i) {
                ddx[i] += d[i] * wc[0];
                acc0 += (double)d[i] * xin[i];
            }
            dw_norm[c * nin] += acc0;
            for (int k = 0; k < nin - 1; ++k) {
                size_t fs = from[k]->shape().sample();
                if (off >= fs) continue;
                size_t len = std::min(plane, fs - off);
                const float* fin = from[k]->data() + n * fs + off;
                float* df = dfrom[k] ? dfrom[k]->data() + n * fs + off : nullptr;
                double acc = 0;
                for (size_t i = 0; i < len; ++i) {
                    if (df) df[i] += d[i] * wc[k + 1];
                    acc += (double)d[i] * fin[i];
                }
                dw_norm[c * nin + k + 1] += acc;
            }
        }
    });
    if (wt == ShortcutWeights::none || !dweights) return;
    for (int ch = 0; ch < nchan; ++ch) {
        std::vector<double> g(nin, 0.0);  // dL/dw_norm for this weight group
        for (int c = 0; c < s.c; ++c)
            if (wt == ShortcutWeights::per_feature || c == ch)
                for (int k = 0; k < nin; ++k) g[k] += dw_norm[(size_t)c * nin + k];
        const float* wn = w.data() + (size_t)ch * nin;
        int kmax = 0;  // the input whose raw weight is the max that softmax subtracts
        for (int k = 1; k < nin; ++k)
            if (weights[ch + k * nchan] > weights[ch + kmax * nchan]) kmax = k;
        for (int j = 0; j < nin; ++j) {
            double raw = weights[ch + j * nchan], total = 0;
            for (int k = 0; k < nin; ++k) {
                double jac;
                if (norm == ShortcutNorm::none) jac = (j == k);
                else if (norm == ShortcutNorm::relu) jac = raw > 0 ? ((j == k) - wn[k]) / sums[ch] : 0.0;
                else  // raw_kmax also moves the max, which scales eps: dw_k/dmax = -w_k eps / sum
                    jac = wn[k] * ((j == k) - wn[j]) - (j == kmax ? wn[k] * 0.0001 / sums[ch] : 0.0);
                total += g[k] * jac;
            }
            dweights[ch + j * nchan] += (float)total;
        }
    }
}

void upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    const Shape &xs = dx.shape(), &ys = dy.shape();
    parallel_for_each((size_t)xs.n * xs.c, [&](size_t nc) {
        const float* d = dy.data() + nc * ys.plane();
        float* out = dx.data() + nc * xs.plane();
        for (int i = 0; i < ys.h; ++i)
            for (int j = 0; j < ys.w; ++j) out[(size_t)(i / stride) * xs.w + j / stride] += scale * d[(size_t)i * ys.w + j];
    });
}

void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    const Shape &xs = dx.shape(), &ys = dy.shape();
    parallel_for_each((size_t)xs.n * xs.c, [&](size_t nc) {
        const float* d = dy.data() + nc * ys.plane();
        float* out = dx.data() + nc * xs.plane();
        for (int i = 0; i < xs.h; ++i)
            for (int j = 0; j < xs.w; ++j)
                if (i / stride < ys.h && j / stride < ys.w)
                    out[(size_t)i * xs.w + j] += scale * d[(size_t)(i / stride) * ys.w + j / stride];
    });
}

void reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx) {
    size_t sample = (size_t)w * h * c, batch = dy.size() / sample;
    int out_c = c / (stride * stride);
    // the reorg is a permutation: each output element maps to exactly one input element, no races
    parallel_for_each(batch * c, [&](size_t bk) {
        size_t b = bk / c;
        int k = (int)(bk % c), c2 = k % out_c, offset = k / out_c;
        for (int j = 0; j < h; ++j)
            for (int i = 0; i < w; ++i) {
                size_t in_index = i + (size_t)w * (j + (size_t)h * (k + (size_t)c * b));
                int w2 = i * stride + offset % stride, h2 = j * stride + offset / stride;
                size_t out_index = w2 + (size_t)w * stride * (h2 + (size_t)h * stride * (c2 + (size_t)out_c * b));
                if (forward) dx.data()[in_index] += dy.data()[out_index];
                else dx.data()[out_index] += dy.data()[in_index];
            }
    });
}

void scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                             Tensor& dfrom) {
    const Shape& fs = from.shape();
    size_t plane = fs.plane();
    if (!scale_wh) {
        parallel_for_each((size_t)fs.n * fs.c, [&](size_t nc) {
            const float* f = from.data() + nc * plane;
            const float* d = dy.data() + nc * plane;
            float* df = dfrom.data() + nc * plane;
            float k = s.data()[nc];
            double acc = 0;
            for (size_t i = 0; i < plane; ++i) {
                df[i] += d[i] * k;
                acc += (double)d[i] * f[i];
            }
            ds.data()[nc] += (float)acc;
        });
        return;
    }
    parallel_for_each(fs.n, [&](size_t n) {
        const float* sp = s.data() + n * plane;
        float* dsp = ds.data() + n * plane;
        for (int c = 0; c < fs.c; ++c) {
            size_t base = ((size_t)n * fs.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) {
                dfrom.data()[base + i] += dy.data()[base + i] * sp[i];
                dsp[i] += dy.data()[base + i] * from.data()[base + i];
            }
        }
    });
}

void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) {
    size_t n = dy.size(), block = 4096;
    parallel_for_each((n + block - 1) / block, [&](size_t blk) {
        size_t e = std::min(n, (blk + 1) * block);
        for (size_t i = blk * block; i < e; ++i) {
            da.data()[i] += dy.data()[i] * b.data()[i];
            db.data()[i] += dy.data()[i] * a.data()[i];
        }
    });
}

void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) {
    size_t per_sample = y.shape().sample(), gsize = per_sample / groups;
    parallel_for_each((size_t)y.shape().n * groups, [&](size_t ng) {
        const float* yy = y.data() + ng * gsize;
        const float* d = dy.data() + ng * gsize;
        float* out = dx.data() + ng * gsize;
        double dot = 0;
        for (size_t i = 0; i < gsize; ++i) dot += (double)d[i] * yy[i];
        for (size_t i = 0; i < gsize; ++i) out[i] += (float)(yy[i] * (d[i] - dot) / temperature);
    });
}

void sgd_update(float* w, float* grad, float* m, size_t n, float lr, float momentum, float decay, int batch,
                const float* skip) {
    if (skip && *skip != 0.0f) return std::fill(grad, grad + n, 0.0f);
    size_t block = 4096;
    parallel_for_each((n + block - 1) / block, [&](size_t blk) {
        size_t e = std::min(n, (blk + 1) * block);
        for (size_t i = blk * block; i < e; ++i) sgd_step((uint)i, w, grad, m, lr, momentum, decay, batch);
    });
}

void adam_update(float* w, float* grad, float* m, float* v, size_t n, float lr, float b1, float b2, float eps,
                 float decay, int batch, int t, const float* skip) {
    if (skip && *skip != 0.0f) return std::fill(grad, grad + n, 0.0f);
    size_t block = 4096;
    parallel_for_each((n + block - 1) / block, [&](size_t blk) {
        size_t e = std::min(n, (blk + 1) * block);
        for (size_t i = blk * block; i < e; ++i) adam_step((uint)i, w, grad, m, v, lr, b1, b2, eps, decay, batch, t);
    });
}

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
