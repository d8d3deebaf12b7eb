// The reference backend: the most direct loops that implement each op's definition.
// It is the oracle the fast backends are tested against, so clarity beats speed here.
#include <cfloat>
#include <cmath>

#include "../backend.h"
#include "../errors.h"

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

    void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
              float beta, float* C, int ldc) override {
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

    void conv2d_affine_act(const Tensor& x, const Tensor& w, const ConvGeom& g, const float* scale,
                           const float* shift, Activation a, Tensor& y) override {
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

    void add_bias(Tensor& y, const float* bias) override {
        const Shape& s = y.shape();
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(y, n, c, i, j) += bias[c];
    }

    void batchnorm_inference(Tensor& y, const float* mean, const float* var, const float* scale, const float* bias,
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

    void shortcut(const Tensor& x, const std::vector<const Tensor*>& from, const float* weights, ShortcutWeights wt,
                  ShortcutNorm norm, Tensor& y) override {
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
        const Shape& s = x.shape();
        for (size_t i = 0; i < y.size(); ++i) y[i] = 0;
        for (int n = 0; n < s.n; ++n)
            for (int c = 0; c < s.c; ++c)
                for (int i = 0; i < s.h; ++i)
                    for (int j = 0; j < s.w; ++j) at(y, n, c, i / stride, j / stride) += scale * at(x, n, c, i, j);
    }

    void reorg(const Tensor& x, int w, int h, int c, int stride, bool forward, Tensor& y) override {
        int batch = (int)(x.size() / ((size_t)w * h * c));
        int out_c = c / (stride * stride);
        for (int b = 0; b < batch; ++b)
            for (int k = 0; k < c; ++k)
                for (int j = 0; j < h; ++j)
                    for (int i = 0; i < w; ++i) {
                        size_t in_index = i + (size_t)w * (j + (size_t)h * (k + (size_t)c * b));
                        int c2 = k % out_c, offset = k / out_c;
                        int w2 = i * stride + offset % stride, h2 = j * stride + offset / stride;
                        size_t out_index = w2 + (size_t)w * stride * (h2 + (size_t)h * stride * (c2 + (size_t)out_c * b));
                        if (forward) y[out_index] = x[in_index];
                        else y[in_index] = x[out_index];
                    }
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
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

std::unique_ptr<Backend> make_backend(const std::string& name) {
    if (name == "reference") return make_reference_backend();
    if (name == "cpu") return make_cpu_backend();
    throw DarknetError("unknown backend '" + name + "' (available: reference, cpu)");
}

std::vector<std::string> backend_names() { return {"reference", "cpu"}; }

}  // namespace dn
