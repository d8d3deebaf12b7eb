// The reference backend: the most direct loops that implement each op's definition.
// It is the oracle the fast backends are tested against, so clarity beats speed here.
#include <cfloat>
#include <cmath>

#include "../backend.h"
#include "../errors.h"
#include "../kernels/dropout.h"
#include "../yolo/detect.h"
#include "../yolo/loss.h"

namespace dn {

namespace {

inline float& at(Tensor& t, int n, int c, int y, int x) {
    const Shape& s = t.shape();
    return t[(((size_t)n * s.c + c) * s.h + y) * s.w + x];
}
inline float at(const Tensor& t, int n, int c, int y, int x) {
    const Shape& s = t.shape();
    return t[(((size_t)n * s.c + c) * s.h + y) * s.w + x];
}

class ReferenceBackend final : public Backend {
public:
    const char* name() const override { return "reference"; }

    void fill(Tensor& y, float value) override {
        for (size_t i = 0; i < y.size(); ++i) y[i] = value;
    }

    void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const Tensor& At, int lda, const Tensor& Bt, int ldb,
              float beta, Tensor& Ct, int ldc) override {
        const float *A = At.data(), *B = Bt.data();
        float* C = Ct.data();
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
                double sum = 0;
                for (int k = 0; k < K; ++k) {
                    float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                    float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                    sum += (double)a * b;
                }
                float& c = C[(size_t)i * ldc + j];
                c = (beta == 0 ? 0.0f : beta * c) + alpha * (float)sum;
            }
    }

    void conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, Tensor& y) override {
        const Shape &xs = x.shape(), &ys = y.shape();
        int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
        for (int n = 0; n < ys.n; ++n)
            for (int oc = 0; oc < ys.c; ++oc) {
                int grp = oc / cout_g;
                for (int oy = 0; oy < ys.h; ++oy)
                    for (int ox = 0; ox < ys.w; ++ox) {
                        double sum = 0;
                        for (int ic = 0; ic < cin_g; ++ic)
                            for (int ky = 0; ky < g.kh; ++ky)
                                for (int kx = 0; kx < g.kw; ++kx) {
                                    int iy = oy * g.stride_y - g.pad + ky * g.dilation;
                                    int ix = ox * g.stride_x - g.pad + kx * g.dilation;
                                    if (iy < 0 || iy >= xs.h || ix < 0 || ix >= xs.w) continue;
                                    sum += (double)at(x, n, grp * cin_g + ic, iy, ix) * at(w, oc, ic, ky, kx);
                                }
                        at(y, n, oc, oy, ox) = (float)sum;
                    }
            }
    }

    void conv2d_affine_act(const Tensor& x, const Tensor& w, const ConvGeom& g, const Tensor* scale_t,
                           const Tensor& shift_t, Activation a, Tensor& y) override {
        const float* scale = scale_t ? scale_t->data() : nullptr;
        const float* shift = shift_t.data();
        conv2d(x, w, g, y);
        const Shape& s = y.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) {
                        float& v = at(y, n, c, i, j);
                        v = (scale ? v * scale[c] : v) + shift[c];
                    }
        activate(y, a);
    }

    void batchnorm_fold(const Tensor& scales, const Tensor& biases, const Tensor& mean, const Tensor& var, float eps,
                        Tensor& scale_out, Tensor& shift_out) override {
        for (size_t c = 0; c < scales.size(); ++c) {
            scale_out[c] = scales[c] / std::sqrt(var[c] + eps);
            shift_out[c] = biases[c] - mean[c] * scale_out[c];
        }
    }

    void add_bias(Tensor& y, const Tensor& bias) override {
        const Shape& s = y.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(y, n, c, i, j) += bias[c];
    }

    void batchnorm_inference(Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& scale, const Tensor& bias,
                             float eps) override {
        const Shape& s = y.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) {
                        float& v = at(y, n, c, i, j);
                        v = (v - mean[c]) / std::sqrt(var[c] + eps) * scale[c] + bias[c];
                    }
    }

    void activate(Tensor& y, Activation a) override {
        const Shape& s = y.shape();
        if (activation_is_elementwise(a)) {
            for (size_t i = 0; i < y.size(); ++i) y[i] = activate_scalar(y[i], a);
            return;
        }
        const float eps = 0.0001f;
        for (int n = 0; n < s.n; ++n)
            for (int i = 0; i < s.h; ++i)
                for (int j = 0; j < s.w; ++j) {
                    double sum = eps;
                    for (int c = 0; c < s.c; ++c) {
                        float v = at(y, n, c, i, j);
                        if (a == Activation::normalize_channels) sum += v > 0 ? v : 0;
                        else sum += std::exp(v);
                    }
                    for (int c = 0; c < s.c; ++c) {
                        float& v = at(y, n, c, i, j);
                        if (a == Activation::normalize_channels) v = v > 0 ? (float)(v / sum) : 0.0f;
                        else v = (float)(std::exp(v) / sum);
                    }
                }
    }

    template <bool kMax>
    void pool(const Tensor& x, const PoolGeom& g, Tensor& y) {
        const Shape &xs = x.shape(), &ys = y.shape();
        int off = -g.padding / 2;
        for (int n = 0; n < ys.n; ++n)
            for (int c = 0; c < ys.c; ++c)
                for (int oy = 0; oy < ys.h; ++oy)
                    for (int ox = 0; ox < ys.w; ++ox) {
                        float best = -FLT_MAX;
                        double sum = 0;
                        int count = 0;
                        for (int ky = 0; ky < g.size; ++ky)
                            for (int kx = 0; kx < g.size; ++kx) {
                                int iy = oy * g.stride_y + off + ky, ix = ox * g.stride_x + off + kx;
                                if (iy < 0 || iy >= xs.h || ix < 0 || ix >= xs.w) continue;
                                float v = at(x, n, c, iy, ix);
                                best = v > best ? v : best;
                                sum += v;
                                ++count;
                            }
                        at(y, n, c, oy, ox) = kMax ? best : (count ? (float)(sum / count) : 0.0f);
                    }
    }
    void maxpool(const Tensor& x, const PoolGeom& g, Tensor& y) override { pool<true>(x, g, y); }
    void avgpool_local(const Tensor& x, const PoolGeom& g, Tensor& y) override { pool<false>(x, g, y); }

    void avgpool_global(const Tensor& x, Tensor& y) override {
        const Shape& s = x.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c) {
                double sum = 0;
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) sum += at(x, n, c, i, j);
                at(y, n, c, 0, 0) = (float)(sum / (s.h * s.w));
            }
    }

    void maxpool_depth(const Tensor& x, Tensor& y) override {
        const Shape &xs = x.shape(), &ys = y.shape();
        for (int n = 0; n < ys.n; ++n)
            for (int c = 0; c < ys.c; ++c)
                for (int i = 0; i < ys.h; ++i)
                    for (int j = 0; j < ys.w; ++j) {
                        float best = -FLT_MAX;
                        for (int k = c; k < xs.c; k += ys.c) best = std::fmax(best, at(x, n, k, i, j));
                        at(y, n, c, i, j) = best;
                    }
    }

    void copy_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) override {
        const Shape& s = x.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < count; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(y, n, dst_c0 + c, i, j) = at(x, n, src_c0 + c, i, j);
    }

    void shortcut(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights_t,
                  ShortcutWeights wt, ShortcutNorm norm, Tensor& y) override {
        const float* weights = weights_t ? weights_t->data() : nullptr;
        // Darknet's shortcut_multilayer_cpu: inputs are added by flat per-sample index where it exists.
        const Shape& s = x.shape();
        size_t per_sample = s.sample();
        int nin = (int)from.size() + 1;
        for (int n = 0; n < s.n; ++n)
            for (size_t i = 0; i < per_sample; ++i) {
                std::vector<float> w(nin, 1.0f);
                if (wt != ShortcutWeights::none) {
                    size_t widx = wt == ShortcutWeights::per_feature ? 0 : i / s.plane();
                    size_t step = wt == ShortcutWeights::per_feature ? 1 : (size_t)s.c;
                    for (int k = 0; k < nin; ++k) w[k] = weights[widx + k * step];
                    if (norm == ShortcutNorm::relu) {
                        double sum = 0.0001;
                        for (float v : w) sum += v > 0 ? v : 0;
                        for (float& v : w) v = (float)((v > 0 ? v : 0) / sum);
                    } else if (norm == ShortcutNorm::softmax) {
                        float mx = -FLT_MAX;
                        for (float v : w) mx = std::fmax(mx, v);
                        double sum = 0.0001;
                        for (float v : w) sum += std::exp(v - mx);
                        for (float& v : w) v = (float)(std::exp(v - mx) / sum);
                    }
                }
                double acc = (double)x[n * per_sample + i] * w[0];
                for (int k = 0; k < nin - 1; ++k) {
                    size_t fs = from[k]->shape().sample();
                    if (i < fs) acc += (double)(*from[k])[n * fs + i] * w[k + 1];
                }
                y[n * per_sample + i] = (float)acc;
            }
    }

    void upsample(const Tensor& x, int stride, float scale, Tensor& y) override {
        const Shape& s = y.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(y, n, c, i, j) = scale * at(x, n, c, i / stride, j / stride);
    }

    void downsample_sum(const Tensor& x, int stride, float scale, Tensor& y) override {
        // rows/columns beyond y.h*stride, y.w*stride (odd sizes) belong to no block: skipped
        const Shape& s = x.shape();
        for (size_t i = 0; i < y.size(); ++i) y[i] = 0;
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < y.shape().h * stride; ++i)
                    for (int j = 0; j < y.shape().w * stride; ++j)
                        at(y, n, c, i / stride, j / stride) += scale * at(x, n, c, i, j);
    }

    // Darknet's reorg_cpu index map over a w x h x c loop: calls f(in_index, out_index) for every element.
    template <class F>
    static void reorg_map(size_t total, int w, int h, int c, int stride, F f) {
        int batch = (int)(total / ((size_t)w * h * c));
        int out_c = c / (stride * stride);
        for (int b = 0; b < batch; ++b)
            for (int k = 0; k < c; ++k)
                for (int j = 0; j < h; ++j)
                    for (int i = 0; i < w; ++i) {
                        size_t in_index = i + (size_t)w * (j + (size_t)h * (k + (size_t)c * b));
                        int c2 = k % out_c, offset = k / out_c;
                        int w2 = i * stride + offset % stride, h2 = j * stride + offset / stride;
                        f(in_index, w2 + (size_t)w * stride * (h2 + (size_t)h * stride * (c2 + (size_t)out_c * b)));
                    }
    }

    void reorg(const Tensor& x, int w, int h, int c, int stride, bool forward, Tensor& y) override {
        reorg_map(x.size(), w, h, c, stride, [&](size_t in, size_t out) {
            if (forward) y[out] = x[in];
            else y[in] = x[out];
        });
    }

    void scale_channels(const Tensor& s, const Tensor& from, bool scale_wh, Tensor& y) override {
        const Shape& fs = from.shape();
        for (int n = 0; n < fs.n; ++n)
            for (int c = 0; c < fs.c; ++c)
                for (int i = 0; i < fs.h; ++i)
                    for (int j = 0; j < fs.w; ++j)
                        at(y, n, c, i, j) = at(from, n, c, i, j) * (scale_wh ? at(s, n, 0, i, j) : at(s, n, c, 0, 0));
    }

    void mul(const Tensor& a, const Tensor& b, Tensor& y) override {
        for (size_t i = 0; i < y.size(); ++i) y[i] = a[i] * b[i];
    }

    void softmax(const Tensor& x, int groups, float temperature, Tensor& y) override {
        size_t per_sample = x.shape().sample(), gsize = per_sample / groups;
        for (int n = 0; n < x.shape().n; ++n)
            for (int g = 0; g < groups; ++g) {
                size_t base = n * per_sample + g * gsize;
                float largest = -FLT_MAX;
                for (size_t i = 0; i < gsize; ++i) largest = std::fmax(largest, x[base + i]);
                double sum = 0;
                for (size_t i = 0; i < gsize; ++i) sum += std::exp(x[base + i] / temperature - largest / temperature);
                for (size_t i = 0; i < gsize; ++i)
                    y[base + i] = (float)(std::exp(x[base + i] / temperature - largest / temperature) / sum);
            }
    }

    void yolo_activate(const Tensor& x, const YoloGeom& g, Tensor& y) override {
        const Shape& s = x.shape();
        int entries = 5 + g.classes;
        for (int n = 0; n < s.n; ++n)
            for (int a = 0; a < g.anchors; ++a)
                for (int e = 0; e < entries; ++e)
                    for (int i = 0; i < s.h; ++i)
                        for (int j = 0; j < s.w; ++j) {
                            float v = at(x, n, a * entries + e, i, j);
                            bool logistic = !g.new_coords && e != 2 && e != 3;
                            if (logistic) v = 1.0f / (1.0f + std::exp(-v));
                            if (e < 2) v = v * g.scale_x_y - 0.5f * (g.scale_x_y - 1.0f);
                            at(y, n, a * entries + e, i, j) = v;
                        }
    }

    // ---- training ------------------------------------------------------------------------------

    void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw) override {
        const Shape &xs = x.shape(), &ys = dy.shape();
        int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
        for (int oc = 0; oc < ys.c; ++oc) {
            int grp = oc / cout_g;
            for (int ic = 0; ic < cin_g; ++ic)
                for (int ky = 0; ky < g.kh; ++ky)
                    for (int kx = 0; kx < g.kw; ++kx) {
                        double sum = 0;
                        for (int n = 0; n < ys.n; ++n)
                            for (int oy = 0; oy < ys.h; ++oy)
                                for (int ox = 0; ox < ys.w; ++ox) {
                                    int iy = oy * g.stride_y - g.pad + ky * g.dilation;
                                    int ix = ox * g.stride_x - g.pad + kx * g.dilation;
                                    if (iy < 0 || iy >= xs.h || ix < 0 || ix >= xs.w) continue;
                                    sum += (double)at(x, n, grp * cin_g + ic, iy, ix) * at(dy, n, oc, oy, ox);
                                }
                        at(dw, oc, ic, ky, kx) += (float)sum;
                    }
        }
    }

    void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx) override {
        const Shape &xs = dx.shape(), &ys = dy.shape();
        int cin_g = xs.c / g.groups, cout_g = ys.c / g.groups;
        for (int n = 0; n < ys.n; ++n)
            for (int oc = 0; oc < ys.c; ++oc) {
                int grp = oc / cout_g;
                for (int oy = 0; oy < ys.h; ++oy)
                    for (int ox = 0; ox < ys.w; ++ox) {
                        float d = at(dy, n, oc, oy, ox);
                        for (int ic = 0; ic < cin_g; ++ic)
                            for (int ky = 0; ky < g.kh; ++ky)
                                for (int kx = 0; kx < g.kw; ++kx) {
                                    int iy = oy * g.stride_y - g.pad + ky * g.dilation;
                                    int ix = ox * g.stride_x - g.pad + kx * g.dilation;
                                    if (iy < 0 || iy >= xs.h || ix < 0 || ix >= xs.w) continue;
                                    at(dx, n, grp * cin_g + ic, iy, ix) += d * at(w, oc, ic, ky, kx);
                                }
                    }
            }
    }

    void bias_backward(const Tensor& dy, Tensor& db) override {
        const Shape& s = dy.shape();
        for (int c = 0; c < s.c; ++c) {
            double sum = 0;
            for (int n = 0; n < s.n; ++n)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) sum += at(dy, n, c, i, j);
            db[c] += (float)sum;
        }
    }

    void batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale, const Tensor& bias,
                         float eps) override {
        const Shape& s = y.shape();
        double count = (double)s.n * s.h * s.w;
        for (int c = 0; c < s.c; ++c) {
            double sum = 0, sq = 0;
            for (int n = 0; n < s.n; ++n)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) sum += at(y, n, c, i, j);
            double m = sum / count;
            for (int n = 0; n < s.n; ++n)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) sq += (at(y, n, c, i, j) - m) * (at(y, n, c, i, j) - m);
            double v = count > 1 ? sq / (count - 1) : 0.0;  // unbiased, as Darknet's variance_cpu
            mean[c] = (float)m;
            var[c] = (float)v;
            double inv = 1.0 / std::sqrt(v + eps);
            for (int n = 0; n < s.n; ++n)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) {
                        float xn = (float)((at(y, n, c, i, j) - m) * inv);
                        at(x_norm, n, c, i, j) = xn;
                        at(y, n, c, i, j) = xn * scale[c] + bias[c];
                    }
        }
    }

    void rolling_update(Tensor& rolling, const Tensor& batch_value, float keep) override {
        for (size_t i = 0; i < rolling.size(); ++i) rolling[i] = keep * rolling[i] + (1.0f - keep) * batch_value[i];
    }

    void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                            Tensor& dscale, Tensor& dbias) override {
        // x_norm = (x - mean) * inv with var unbiased (divides by N-1):
        // dx = inv * (g - mean(g) - x_norm * sum(g * x_norm) / (N - 1)),  g = dy * scale
        const Shape& s = dy.shape();
        double N = (double)s.n * s.h * s.w;
        for (int c = 0; c < s.c; ++c) {
            double sdy = 0, sdyx = 0;
            for (int n = 0; n < s.n; ++n)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) {
                        sdy += at(dy, n, c, i, j);
                        sdyx += (double)at(dy, n, c, i, j) * at(x_norm, n, c, i, j);
                    }
            dscale[c] += (float)sdyx;
            dbias[c] += (float)sdy;
            double inv = 1.0 / std::sqrt((double)var[c] + eps);
            double gmean = scale[c] * sdy / N, gx = scale[c] * sdyx / (N > 1 ? N - 1 : 1);
            for (int n = 0; n < s.n; ++n)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) {
                        float& d = at(dy, n, c, i, j);
                        d = (float)(inv * (scale[c] * d - gmean - at(x_norm, n, c, i, j) * gx));
                    }
        }
    }

    void activate_backward(const Tensor& x, Tensor& dy, Activation a) override {
        if (activation_is_elementwise(a)) {
            for (size_t i = 0; i < dy.size(); ++i) dy[i] *= activate_gradient(x[i], a);
            return;
        }
        // y_c = f(x_c) / S, S = eps + sum_k f(x_k): dL/dx_c = f'(x_c) * (g_c - sum_k g_k y_k) / S
        const Shape& s = x.shape();
        const float eps = 0.0001f;
        bool relu_form = a == Activation::normalize_channels;
        for (int n = 0; n < s.n; ++n)
            for (int i = 0; i < s.h; ++i)
                for (int j = 0; j < s.w; ++j) {
                    double S = eps, gy = 0;
                    for (int c = 0; c < s.c; ++c) {
                        float v = at(x, n, c, i, j);
                        S += relu_form ? (v > 0 ? v : 0) : std::exp(v);
                    }
                    for (int c = 0; c < s.c; ++c) {
                        float v = at(x, n, c, i, j);
                        double f = relu_form ? (v > 0 ? v : 0) : std::exp(v);
                        gy += at(dy, n, c, i, j) * f / S;
                    }
                    for (int c = 0; c < s.c; ++c) {
                        float v = at(x, n, c, i, j);
                        double df = relu_form ? (v > 0 ? 1.0 : 0.0) : std::exp(v);
                        float& d = at(dy, n, c, i, j);
                        d = (float)(df * (d - gy) / S);
                    }
                }
    }

    template <bool kMax>
    void pool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
        const Shape &xs = x.shape(), &ys = dy.shape();
        int off = -g.padding / 2;
        for (int n = 0; n < ys.n; ++n)
            for (int c = 0; c < ys.c; ++c)
                for (int oy = 0; oy < ys.h; ++oy)
                    for (int ox = 0; ox < ys.w; ++ox) {
                        float best = -FLT_MAX;
                        int by = -1, bx = -1, count = 0;
                        for (int ky = 0; ky < g.size; ++ky)
                            for (int kx = 0; kx < g.size; ++kx) {
                                int iy = oy * g.stride_y + off + ky, ix = ox * g.stride_x + off + kx;
                                if (iy < 0 || iy >= xs.h || ix < 0 || ix >= xs.w) continue;
                                ++count;
                                if (at(x, n, c, iy, ix) > best) best = at(x, n, c, iy, ix), by = iy, bx = ix;
                            }
                        float d = at(dy, n, c, oy, ox);
                        if (kMax) {
                            if (by >= 0) at(dx, n, c, by, bx) += d;
                            continue;
                        }
                        for (int ky = 0; ky < g.size; ++ky)
                            for (int kx = 0; kx < g.size; ++kx) {
                                int iy = oy * g.stride_y + off + ky, ix = ox * g.stride_x + off + kx;
                                if (iy < 0 || iy >= xs.h || ix < 0 || ix >= xs.w) continue;
                                at(dx, n, c, iy, ix) += d / count;
                            }
                    }
    }
    void maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) override {
        pool_backward<true>(x, dy, g, dx);
    }
    void avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) override {
        pool_backward<false>(x, dy, g, dx);
    }

    void avgpool_global_backward(const Tensor& dy, Tensor& dx) override {
        const Shape& s = dx.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(dx, n, c, i, j) += at(dy, n, c, 0, 0) / (s.h * s.w);
    }

    void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
        const Shape &xs = x.shape(), &ys = dy.shape();
        for (int n = 0; n < ys.n; ++n)
            for (int c = 0; c < ys.c; ++c)
                for (int i = 0; i < ys.h; ++i)
                    for (int j = 0; j < ys.w; ++j) {
                        float best = -FLT_MAX;
                        int bk = -1;
                        for (int k = c; k < xs.c; k += ys.c)
                            if (at(x, n, k, i, j) > best) best = at(x, n, k, i, j), bk = k;
                        if (bk >= 0) at(dx, n, bk, i, j) += at(dy, n, c, i, j);
                    }
    }

    void add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) override {
        const Shape& s = x.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < count; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(y, n, dst_c0 + c, i, j) += at(x, n, src_c0 + c, i, j);
    }

    void shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights_t,
                           ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                           const std::vector<Tensor*>& dfrom, Tensor* dweights_t) override {
        const float* weights = weights_t ? weights_t->data() : nullptr;
        float* dweights = dweights_t ? dweights_t->data() : nullptr;
        // y_i = sum_k w_k(i) * in_k[i] with w = normalise(raw weights): chain through the normalisation.
        const Shape& s = x.shape();
        size_t per_sample = s.sample();
        int nin = (int)from.size() + 1;
        for (int n = 0; n < s.n; ++n)
            for (size_t i = 0; i < per_sample; ++i) {
                size_t widx = wt == ShortcutWeights::per_channel ? i / s.plane() : 0;
                size_t step = wt == ShortcutWeights::per_channel ? (size_t)s.c : 1;
                std::vector<double> raw(nin, 1.0), w(nin, 1.0), in(nin, 0.0);
                double sum = 0.0001, mx = -FLT_MAX;
                int kmax = 0;  // the input whose raw weight is the max that softmax subtracts
                if (wt != ShortcutWeights::none) {
                    for (int k = 0; k < nin; ++k) {
                        raw[k] = weights[widx + k * step];
                        if (raw[k] > mx) mx = raw[k], kmax = k;
                    }
                    for (int k = 0; k < nin; ++k) {
                        if (norm == ShortcutNorm::relu) sum += raw[k] > 0 ? raw[k] : 0;
                        if (norm == ShortcutNorm::softmax) sum += std::exp(raw[k] - mx);
                    }
                    for (int k = 0; k < nin; ++k) {
                        if (norm == ShortcutNorm::none) w[k] = raw[k];
                        if (norm == ShortcutNorm::relu) w[k] = (raw[k] > 0 ? raw[k] : 0) / sum;
                        if (norm == ShortcutNorm::softmax) w[k] = std::exp(raw[k] - mx) / sum;
                    }
                }
                double d = dy[n * per_sample + i];
                in[0] = x[n * per_sample + i];
                dx[n * per_sample + i] += (float)(d * w[0]);
                for (int k = 1; k < nin; ++k) {
                    size_t fs = from[k - 1]->shape().sample();
                    if (i >= fs) continue;
                    in[k] = (*from[k - 1])[n * fs + i];
                    if (dfrom[k - 1]) (*dfrom[k - 1])[n * fs + i] += (float)(d * w[k]);
                }
                if (wt == ShortcutWeights::none || !dweights) continue;
                // dL/dw_k = d * in_k; then through the normalisation to the raw weights
                for (int j = 0; j < nin; ++j) {
                    double g = 0;
                    for (int k = 0; k < nin; ++k) {
                        double dwk_draw;
                        if (norm == ShortcutNorm::none) dwk_draw = (j == k);
                        else if (norm == ShortcutNorm::relu)
                            dwk_draw = raw[j] > 0 ? ((j == k) - w[k]) / sum : 0.0;
                        else  // softmax: w_k (delta_jk - w_j); raw_kmax also moves the max, which scales eps:
                            // w_k = e^(raw_k - mx) / (eps + sum e^(raw_i - mx)), dw_k/dmx = -w_k eps / sum
                            dwk_draw = w[k] * ((j == k) - w[j]) - (j == kmax ? w[k] * 0.0001 / sum : 0.0);
                        g += d * in[k] * dwk_draw;
                    }
                    dweights[widx + j * step] += (float)g;
                }
            }
    }

    void upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) override {
        const Shape& s = dy.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(dx, n, c, i / stride, j / stride) += scale * at(dy, n, c, i, j);
    }

    void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) override {
        const Shape& s = dx.shape();
        const Shape& ys = dy.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j)
                        if (i / stride < ys.h && j / stride < ys.w)
                            at(dx, n, c, i, j) += scale * at(dy, n, c, i / stride, j / stride);
    }

    void reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx) override {
        reorg_map(dy.size(), w, h, c, stride, [&](size_t in, size_t out) {
            if (forward) dx[in] += dy[out];
            else dx[out] += dy[in];
        });
    }

    void scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                                 Tensor& dfrom) override {
        const Shape& fs = from.shape();
        for (int n = 0; n < fs.n; ++n)
            for (int c = 0; c < fs.c; ++c)
                for (int i = 0; i < fs.h; ++i)
                    for (int j = 0; j < fs.w; ++j) {
                        float d = at(dy, n, c, i, j);
                        float k = scale_wh ? at(s, n, 0, i, j) : at(s, n, c, 0, 0);
                        at(dfrom, n, c, i, j) += d * k;
                        (scale_wh ? at(ds, n, 0, i, j) : at(ds, n, c, 0, 0)) += d * at(from, n, c, i, j);
                    }
    }

    void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) override {
        for (size_t i = 0; i < dy.size(); ++i) {
            da[i] += dy[i] * b[i];
            db[i] += dy[i] * a[i];
        }
    }

    void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) override {
        size_t per_sample = y.shape().sample(), gsize = per_sample / groups;
        for (int n = 0; n < y.shape().n; ++n)
            for (int g = 0; g < groups; ++g) {
                size_t base = n * per_sample + g * gsize;
                double dot = 0;
                for (size_t i = 0; i < gsize; ++i) dot += (double)dy[base + i] * y[base + i];
                for (size_t i = 0; i < gsize; ++i) dx[base + i] += (float)(y[base + i] * (dy[base + i] - dot) / temperature);
            }
    }

    void add_scaled(const Tensor& x, float alpha, Tensor& y) override {
        require_same_size("add_scaled", x, y);
        for (size_t i = 0; i < y.size(); ++i) y[i] += alpha * x[i];
    }

    void unscale_check(Tensor& grad, float factor, Tensor& found) override {
        for (size_t i = 0; i < grad.size(); ++i) {
            grad[i] *= factor;
            if (!std::isfinite(grad[i])) found[0] = 1.0f;
        }
    }

    void yolo_loss(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                   Tensor& delta, Tensor& stats) override {
        yolo_loss_images(output, truths, anchors, a, delta, stats, 0, output.shape().n);
    }

    void yolo_candidates(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a, Tensor& candidates,
                         Tensor& counts) override {
        yolo_candidates_images(output, anchors, a, candidates, counts, 0, output.shape().n);
    }

    void dropout_mask(Tensor& mask, float probability, uint64_t seed) override {
        for (size_t i = 0; i < mask.size(); ++i)
            mask[i] = dropout_scale((uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)i, probability);
    }

    void sgd_update(Tensor& w, Tensor& grad, Tensor& m, float lr, float momentum, float decay, int batch,
                    const Tensor* skip) override {
        if (skipped(skip, grad)) return;
        for (size_t i = 0; i < w.size(); ++i) {
            double upd = (double)m[i] - grad[i] - (double)decay * batch * w[i];
            w[i] = (float)(w[i] + (double)lr / batch * upd);
            m[i] = (float)(momentum * upd);
            grad[i] = 0;
        }
    }

    void adam_update(Tensor& w, Tensor& grad, Tensor& m, Tensor& v, float lr, float b1, float b2, float eps,
                     float decay, int batch, int t, const Tensor* skip) override {
        if (skipped(skip, grad)) return;
        for (size_t i = 0; i < w.size(); ++i) {
            double d = -(double)grad[i] - (double)decay * batch * w[i];
            m[i] = (float)(b1 * m[i] + (1 - b1) * d);
            v[i] = (float)(b2 * v[i] + (1 - b2) * d * d);
            double mhat = m[i] / (1 - std::pow((double)b1, t)), vhat = v[i] / (1 - std::pow((double)b2, t));
            w[i] = (float)(w[i] + lr * mhat / (std::sqrt(std::fabs(vhat)) + eps));
            grad[i] = 0;
        }
    }
    // The optimizers' skip flag (backend.h): set, the step only drops the gradient.
    static bool skipped(const Tensor* skip, Tensor& grad) {
        if (!skip || (*skip)[0] == 0.0f) return false;
        for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0;
        return true;
    }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace dn
