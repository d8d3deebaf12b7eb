#include "training_ops.h"

#include <cfloat>
#include <cmath>

#include "../kernels/im2col.h"
#include "../kernels/optimizer.h"
#include "gemm.h"
#include "thread_pool.h"

namespace dn::cpu {

namespace {

template <class F>
void pfor(size_t n, F&& fn, size_t grain = 1) {
    ThreadPool::instance().parallel_for(n, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) fn(i);
    }, grain);
}

Im2colArgs im2col_args(const Shape& xs, const Shape& ys, const ConvGeom& g) {
    return Im2colArgs{xs.c / g.groups, xs.h, xs.w, g.kh, g.kw, g.pad, g.stride_y, g.stride_x, g.dilation, ys.h, ys.w};
}

// Adds column-matrix row `row` back into the image (the adjoint of im2col_row).
void col2im_add_channel(int c, const float* col, float* im, const Im2colArgs& a) {
    float* dst = im + (size_t)c * a.height * a.width;
    for (int ky = 0; ky < a.kh; ++ky)
        for (int kx = 0; kx < a.kw; ++kx) {
            const float* src = col + ((size_t)(c * a.kh + ky) * a.kw + kx) * a.out_h * a.out_w;
            for (int oy = 0; oy < a.out_h; ++oy) {
                int iy = oy * a.stride_y - a.pad + ky * a.dilation;
                if (iy < 0 || iy >= a.height) continue;
                for (int ox = 0; ox < a.out_w; ++ox) {
                    int ix = ox * a.stride_x - a.pad + kx * a.dilation;
                    if (ix >= 0 && ix < a.width) dst[(size_t)iy * a.width + ix] += src[(size_t)oy * a.out_w + ox];
                }
            }
        }
}

}  // namespace

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw, std::vector<float>& ws) {
    const Shape &xs = x.shape(), &ys = dy.shape();
    int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
    int K = cin_g * g.kh * g.kw, N = ys.h * ys.w;
    Im2colArgs a = im2col_args(xs, ys, g);
    ws.resize((size_t)K * N);
    for (int n = 0; n < xs.n; ++n)
        for (int grp = 0; grp < g.groups; ++grp) {
            const float* im = x.data() + ((size_t)n * xs.c + (size_t)grp * cin_g) * xs.plane();
            float* col = ws.data();
            pfor(K, [&](size_t row) { im2col_row((uint)row, im, col, a); });
            const float* d = dy.data() + ((size_t)n * ys.c + (size_t)grp * cout_g) * N;
            // dW[cout_g, K] += dY[cout_g, N] * col[K, N]^T
            cpu_sgemm(false, true, cout_g, K, N, 1.0f, d, N, col, N, 1.0f, dw.data() + (size_t)grp * cout_g * K, K);
        }
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx, std::vector<float>& ws) {
    const Shape &xs = dx.shape(), &ys = dy.shape();
    int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
    int K = cin_g * g.kh * g.kw, N = ys.h * ys.w;
    Im2colArgs a = im2col_args(xs, ys, g);
    ws.resize((size_t)K * N);
    for (int n = 0; n < xs.n; ++n)
        for (int grp = 0; grp < g.groups; ++grp) {
            const float* d = dy.data() + ((size_t)n * ys.c + (size_t)grp * cout_g) * N;
            float* col = ws.data();
            // col[K, N] = W[cout_g, K]^T * dY[cout_g, N], then scattered back into the image
            cpu_sgemm(true, false, K, N, cout_g, 1.0f, w.data() + (size_t)grp * cout_g * K, K, d, N, 0.0f, col, N);
            float* im = dx.data() + ((size_t)n * xs.c + (size_t)grp * cin_g) * xs.plane();
            pfor(cin_g, [&](size_t c) { col2im_add_channel((int)c, col, im, a); });
        }
}

void bias_backward(const Tensor& dy, float* db) {
    const Shape& s = dy.shape();
    size_t plane = s.plane();
    pfor(s.c, [&](size_t c) {
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
    pfor(s.c, [&](size_t c) {
        double sum = 0, sq = 0;
        for (int n = 0; n < s.n; ++n) {
            const float* p = y.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) sum += p[i];
        }
        double m = sum / count;
        for (int n = 0; n < s.n; ++n) {
            const float* p = y.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) sq += (p[i] - m) * (p[i] - m);
        }
        double v = count > 1 ? sq / (count - 1) : 0.0;
        mean[c] = (float)m;
        var[c] = (float)v;
        float inv = (float)(1.0 / std::sqrt(v + eps)), fm = (float)m;
        for (int n = 0; n < s.n; ++n) {
            float* p = y.data() + ((size_t)n * s.c + c) * plane;
            float* xn = x_norm.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) {
                xn[i] = (p[i] - fm) * inv;
                p[i] = xn[i] * scale[c] + bias[c];
            }
        }
    });
}

void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const float* scale, const float* var, float eps,
                        float* dscale, float* dbias) {
    const Shape& s = dy.shape();
    size_t plane = s.plane();
    double N = (double)s.n * plane;
    pfor(s.c, [&](size_t c) {
        double sdy = 0, sdyx = 0;
        for (int n = 0; n < s.n; ++n) {
            const float* d = dy.data() + ((size_t)n * s.c + c) * plane;
            const float* xn = x_norm.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) sdy += d[i], sdyx += (double)d[i] * xn[i];
        }
        dscale[c] += (float)sdyx;
        dbias[c] += (float)sdy;
        float inv = (float)(1.0 / std::sqrt((double)var[c] + eps));
        float gmean = (float)(scale[c] * sdy / N), gx = (float)(scale[c] * sdyx / (N > 1 ? N - 1 : 1));
        for (int n = 0; n < s.n; ++n) {
            float* d = dy.data() + ((size_t)n * s.c + c) * plane;
            const float* xn = x_norm.data() + ((size_t)n * s.c + c) * plane;
            for (size_t i = 0; i < plane; ++i) d[i] = inv * (scale[c] * d[i] - gmean - xn[i] * gx);
        }
    });
}

void activate_backward(const Tensor& x, Tensor& dy, Activation a) {
    if (a == Activation::linear) return;
    if (activation_is_elementwise(a)) {
        size_t n = dy.size(), block = 4096;
        pfor((n + block - 1) / block, [&](size_t blk) {
            size_t e = std::min(n, (blk + 1) * block);
            for (size_t i = blk * block; i < e; ++i) dy.data()[i] *= activate_gradient(x.data()[i], a);
        });
        return;
    }
    const Shape& s = x.shape();
    size_t plane = s.plane();
    bool relu_form = a == Activation::normalize_channels;
    pfor((size_t)s.n * plane, [&](size_t np) {
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
    pfor((size_t)ys.n * ys.c, [&](size_t nc) {
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
    pfor((size_t)s.n * s.c, [&](size_t nc) {
        float g = dy.data()[nc] / plane;
        float* p = dx.data() + nc * plane;
        for (size_t i = 0; i < plane; ++i) p[i] += g;
    });
}

void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
    const Shape &xs = x.shape(), &ys = dy.shape();
    size_t plane = xs.plane();
    pfor((size_t)ys.n * ys.c, [&](size_t nc) {
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
    pfor((size_t)xs.n * count, [&](size_t nc) {
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
    // normalised weights per channel group (as in the forward) and their Jacobian w.r.t. the raw weights
    std::vector<float> w((size_t)nin * nchan, 1.0f), sums(nchan, 1.0f);
    if (wt != ShortcutWeights::none)
        for (int ch = 0; ch < nchan; ++ch) {
            float mx = -FLT_MAX, sum = 0.0001f;
            for (int k = 0; k < nin; ++k) mx = std::max(mx, weights[ch + k * nchan]);
            for (int k = 0; k < nin; ++k) {
                float v = weights[ch + k * nchan];
                sum += norm == ShortcutNorm::relu ? std::max(v, 0.0f) : std::exp(v - mx);
            }
            sums[ch] = sum;
            for (int k = 0; k < nin; ++k) {
                float v = weights[ch + k * nchan];
                if (norm == ShortcutNorm::relu) v = std::max(v, 0.0f) / sum;
                else if (norm == ShortcutNorm::softmax) v = std::exp(v - mx) / sum;
                w[(size_t)ch * nin + k] = v;
            }
        }
    // dL/d(normalised w) accumulated per (channel group, input), reduced over the batch afterwards
    std::vector<double> dw_norm((size_t)s.c * nin, 0.0);
    pfor(s.c, [&](size_t c) {
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
    pfor((size_t)xs.n * xs.c, [&](size_t nc) {
        const float* d = dy.data() + nc * ys.plane();
        float* out = dx.data() + nc * xs.plane();
        for (int i = 0; i < ys.h; ++i)
            for (int j = 0; j < ys.w; ++j) out[(size_t)(i / stride) * xs.w + j / stride] += scale * d[(size_t)i * ys.w + j];
    });
}

void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    const Shape &xs = dx.shape(), &ys = dy.shape();
    pfor((size_t)xs.n * xs.c, [&](size_t nc) {
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
    pfor(batch * c, [&](size_t bk) {
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
        pfor((size_t)fs.n * fs.c, [&](size_t nc) {
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
    pfor(fs.n, [&](size_t n) {
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
    pfor((n + block - 1) / block, [&](size_t blk) {
        size_t e = std::min(n, (blk + 1) * block);
        for (size_t i = blk * block; i < e; ++i) {
            da.data()[i] += dy.data()[i] * b.data()[i];
            db.data()[i] += dy.data()[i] * a.data()[i];
        }
    });
}

void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) {
    size_t per_sample = y.shape().sample(), gsize = per_sample / groups;
    pfor((size_t)y.shape().n * groups, [&](size_t ng) {
        const float* yy = y.data() + ng * gsize;
        const float* d = dy.data() + ng * gsize;
        float* out = dx.data() + ng * gsize;
        double dot = 0;
        for (size_t i = 0; i < gsize; ++i) dot += (double)d[i] * yy[i];
        for (size_t i = 0; i < gsize; ++i) out[i] += (float)(yy[i] * (d[i] - dot) / temperature);
    });
}

void sgd_update(float* w, float* grad, float* m, size_t n, float lr, float momentum, float decay, int batch) {
    size_t block = 4096;
    pfor((n + block - 1) / block, [&](size_t blk) {
        size_t e = std::min(n, (blk + 1) * block);
        for (size_t i = blk * block; i < e; ++i) sgd_step((uint)i, w, grad, m, lr, momentum, decay, batch);
    });
}

void adam_update(float* w, float* grad, float* m, float* v, size_t n, float lr, float b1, float b2, float eps,
                 float decay, int batch, int t) {
    size_t block = 4096;
    pfor((n + block - 1) / block, [&](size_t blk) {
        size_t e = std::min(n, (blk + 1) * block);
        for (size_t i = blk * block; i < e; ++i) adam_step((uint)i, w, grad, m, v, lr, b1, b2, eps, decay, batch, t);
    });
}

}  // namespace dn::cpu
