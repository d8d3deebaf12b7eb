// The fast CPU backend: convolutions in conv2d.cpp (implicit GEMM, Winograd, fused epilogue),
// and the single-source kernels of src-lib/kernels run as parallel loops on a persistent pool.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "../backend.h"
#include "../errors.h"
#include "../kernels/dropout.h"
#include "../kernels/yolo.h"
#include "../yolo/detect.h"
#include "../yolo/loss.h"
#include "conv2d.h"
#include "copy_ops.h"
#include "gemm.h"
#include "maxpool.h"
#include "simd.h"
#include "thread_pool.h"
#include "shortcut_weights.h"
#include "winograd.h"
#include "training_ops.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

namespace {

class CpuBackend final : public Backend {
public:
    const char* name() const override { return "cpu"; }

    void fill(Tensor& y, float value) override {
        float* d = y.data();
        std::fill(d, d + y.size(), value);
    }

    void gemm(bool ta, bool tb, int M, int N, int K, float alpha, const Tensor& A, int lda, const Tensor& B, int ldb,
              float beta, Tensor& C, int ldc) override {
        cpu_sgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
    }

    void conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, Tensor& y) override {
        cpu_conv2d(x, w, g, nullptr, nullptr, Activation::linear, y, conv_ws_, kept_filters(w));
    }

    // Batch norm (as scale/shift) and elementwise activations run in the GEMM epilogue; the two
    // channel-mixing activations need every channel of a pixel, so they run afterwards.
    void conv2d_affine_act(const Tensor& x, const Tensor& w, const ConvGeom& g, const Tensor* scale,
                           const Tensor& shift, Activation a, Tensor& y) override {
        bool fused = activation_is_elementwise(a);
        cpu_conv2d(x, w, g, scale ? scale->data() : nullptr, shift.data(), fused ? a : Activation::linear, y, conv_ws_,
                   kept_filters(w));
        if (!fused) activate(y, a);
    }

    void batchnorm_fold(const Tensor& scales, const Tensor& biases, const Tensor& mean, const Tensor& var, float eps,
                        Tensor& scale_out, Tensor& shift_out) override {
        const float *sc = scales.data(), *b = biases.data(), *m = mean.data(), *v = var.data();
        float *k = scale_out.data(), *sh = shift_out.data();
        for (size_t c = 0; c < scales.size(); ++c) {
            k[c] = sc[c] / std::sqrt(v[c] + eps);
            sh[c] = b[c] - m[c] * k[c];
        }
    }

    void add_bias(Tensor& y, const Tensor& bias_t) override {
        const float* bias = bias_t.data();
        const Shape& s = y.shape();
        size_t plane = s.plane();
        float* d = y.data();
        parallel_for_each((size_t)s.n * s.c, [&](size_t nc) {
            float b = bias[nc % s.c];
            float* p = d + nc * plane;
            for (size_t i = 0; i < plane; ++i) p[i] += b;
        });
    }

    void batchnorm_inference(Tensor& y, const Tensor& mean_t, const Tensor& var_t, const Tensor& scale_t,
                             const Tensor& bias_t, float eps) override {
        const float *mean = mean_t.data(), *var = var_t.data(), *scale = scale_t.data(), *bias = bias_t.data();
        const Shape& s = y.shape();
        size_t plane = s.plane();
        float* d = y.data();
        parallel_for_each((size_t)s.n * s.c, [&](size_t nc) {
            int c = (int)(nc % s.c);
            float inv = 1.0f / std::sqrt(var[c] + eps);
            float m = mean[c], sc = scale[c], b = bias[c];
            float* p = d + nc * plane;
            for (size_t i = 0; i < plane; ++i) p[i] = (p[i] - m) * inv * sc + b;
        });
    }

    void activate(Tensor& y, Activation a) override {
        float* d = y.data();
        if (a == Activation::linear) return;
        if (activation_is_elementwise(a)) {
            size_t n = y.size(), block = 4096;
            parallel_for_each((n + block - 1) / block, [&](size_t blk) {
                size_t e = std::min(n, (blk + 1) * block);
                for (size_t i = blk * block; i < e; ++i) d[i] = activate_scalar(d[i], a);
            });
            return;
        }
        const Shape& s = y.shape();
        size_t plane = s.plane();
        parallel_for_each((size_t)s.n * plane, [&](size_t np) {
            size_t n = np / plane, p = np % plane;
            float* base = d + n * s.sample() + p;
            float sum = 0.0001f;
            for (int c = 0; c < s.c; ++c) {
                float v = base[c * plane];
                sum += a == Activation::normalize_channels ? (v > 0 ? v : 0) : std::exp(v);
            }
            for (int c = 0; c < s.c; ++c) {
                float& v = base[c * plane];
                v = a == Activation::normalize_channels ? (v > 0 ? v / sum : 0) : std::exp(v) / sum;
            }
        });
    }

    // max pooling: maxpool.cpp (separable, vectorized)
    void maxpool(const Tensor& x, const PoolGeom& g, Tensor& y) override { cpu::maxpool_forward(x, g, y); }

    void avgpool_local(const Tensor& x, const PoolGeom& g, Tensor& y) override {
        const Shape &xs = x.shape(), &ys = y.shape();
        int off = -g.padding / 2;
        parallel_for_each((size_t)ys.n * ys.c, [&](size_t nc) {
            const float* src = x.data() + nc * xs.plane();
            float* dst = y.data() + nc * ys.plane();
            for (int oy = 0; oy < ys.h; ++oy) {
                int y0 = oy * g.stride_y + off;
                int ky0 = std::max(0, -y0), ky1 = std::min(g.size, xs.h - y0);
                for (int ox = 0; ox < ys.w; ++ox) {
                    int x0 = ox * g.stride_x + off;
                    int kx0 = std::max(0, -x0), kx1 = std::min(g.size, xs.w - x0);
                    float sum = 0;
                    for (int ky = ky0; ky < ky1; ++ky) {
                        const float* row = src + (size_t)(y0 + ky) * xs.w + x0;
                        for (int kx = kx0; kx < kx1; ++kx) sum += row[kx];
                    }
                    int count = std::max(0, ky1 - ky0) * std::max(0, kx1 - kx0);
                    dst[(size_t)oy * ys.w + ox] = count ? sum / count : 0.0f;
                }
            }
        });
    }

    void avgpool_global(const Tensor& x, Tensor& y) override {
        const Shape& s = x.shape();
        size_t plane = s.plane();
        parallel_for_each((size_t)s.n * s.c, [&](size_t nc) {
            const float* p = x.data() + nc * plane;
            float sum = 0;
            for (size_t i = 0; i < plane; ++i) sum += p[i];
            y.data()[nc] = sum / plane;
        });
    }

    void maxpool_depth(const Tensor& x, Tensor& y) override {
        const Shape &xs = x.shape(), &ys = y.shape();
        size_t plane = xs.plane();
        parallel_for_each((size_t)ys.n * ys.c, [&](size_t nc) {
            size_t n = nc / ys.c;
            int c = (int)(nc % ys.c);
            float* dst = y.data() + nc * plane;
            for (size_t i = 0; i < plane; ++i) dst[i] = -FLT_MAX;
            for (int k = c; k < xs.c; k += ys.c) {
                const float* src = x.data() + (n * xs.c + k) * plane;
                for (size_t i = 0; i < plane; ++i) dst[i] = std::max(dst[i], src[i]);
            }
        });
    }

    // Routes: one contiguous block of count planes per sample, copied in parallel (copy_ops.cpp).
    void copy_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) override {
        const Shape &xs = x.shape(), &ys = y.shape();
        size_t block = (size_t)count * xs.plane();
        const float* src = x.data() + (size_t)src_c0 * xs.plane();
        float* dst = y.data() + (size_t)dst_c0 * ys.plane();
        cpu::copy_blocks(src, xs.sample(), dst, ys.sample(), block, xs.n);
    }

    void shortcut(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights_t,
                  ShortcutWeights wt, ShortcutNorm norm, Tensor& y) override {
        const float* weights = weights_t ? weights_t->data() : nullptr;
        const Shape& s = x.shape();
        size_t per_sample = s.sample(), plane = s.plane();
        int nin = (int)from.size() + 1;
        // per_feature: one weight per input; per_channel: one per input and channel.
        std::vector<float> w, sums;
        cpu::normalize_shortcut_weights(weights, wt, norm, nin, wt == ShortcutWeights::per_channel ? s.c : 1, w, sums);
        parallel_for_each((size_t)s.n * s.c, [&](size_t nc) {
            size_t n = nc / s.c, c = nc % s.c;
            const float* wc = w.data() + (wt == ShortcutWeights::per_channel ? c * nin : 0);
            size_t off = c * plane;
            const float* src = x.data() + n * per_sample + off;
            float* dst = y.data() + n * per_sample + off;
            for (size_t i = 0; i < plane; ++i) dst[i] = src[i] * wc[0];
            for (int k = 0; k < nin - 1; ++k) {
                size_t fs = from[k]->shape().sample();
                if (off >= fs) continue;
                const float* add = from[k]->data() + n * fs + off;
                size_t len = std::min(plane, fs - off);
                float wk = wc[k + 1];
                for (size_t i = 0; i < len; ++i) dst[i] += add[i] * wk;
            }
        });
    }

    // copy_ops.cpp: each input row widened once, then copied to the other output rows
    void upsample(const Tensor& x, int stride, float scale, Tensor& y) override {
        cpu::upsample_nearest(x, stride, scale, y);
    }

    void downsample_sum(const Tensor& x, int stride, float scale, Tensor& y) override {
        const Shape &xs = x.shape(), &ys = y.shape();
        parallel_for_each((size_t)ys.n * ys.c, [&](size_t nc) {
            const float* src = x.data() + nc * xs.plane();
            float* dst = y.data() + nc * ys.plane();
            for (int i = 0; i < ys.h; ++i)
                for (int j = 0; j < ys.w; ++j) {
                    float sum = 0;
                    for (int dy = 0; dy < stride; ++dy)
                        for (int dx = 0; dx < stride; ++dx) {
                            int sy = i * stride + dy, sx = j * stride + dx;
                            if (sy < xs.h && sx < xs.w) sum += src[(size_t)sy * xs.w + sx];
                        }
                    dst[(size_t)i * ys.w + j] = scale * sum;
                }
        });
    }

    void reorg(const Tensor& x, int w, int h, int c, int stride, bool forward, Tensor& y) override {
        size_t sample = (size_t)w * h * c;
        size_t batch = x.size() / sample;
        int out_c = c / (stride * stride);
        parallel_for_each(batch * c, [&](size_t bk) {
            size_t b = bk / c;
            int k = (int)(bk % c);
            int c2 = k % out_c, offset = k / out_c;
            for (int j = 0; j < h; ++j)
                for (int i = 0; i < w; ++i) {
                    size_t in_index = i + (size_t)w * (j + (size_t)h * (k + (size_t)c * b));
                    int w2 = i * stride + offset % stride, h2 = j * stride + offset / stride;
                    size_t out_index = w2 + (size_t)w * stride * (h2 + (size_t)h * stride * (c2 + (size_t)out_c * b));
                    if (forward) y.data()[out_index] = x.data()[in_index];
                    else y.data()[in_index] = x.data()[out_index];
                }
        });
    }

    void scale_channels(const Tensor& s, const Tensor& from, bool scale_wh, Tensor& y) override {
        const Shape& fs = from.shape();
        size_t plane = fs.plane();
        parallel_for_each((size_t)fs.n * fs.c, [&](size_t nc) {
            const float* f = from.data() + nc * plane;
            float* d = y.data() + nc * plane;
            if (scale_wh) {
                const float* sp = s.data() + (nc / fs.c) * plane;
                for (size_t i = 0; i < plane; ++i) d[i] = f[i] * sp[i];
            } else {
                float k = s.data()[nc];
                for (size_t i = 0; i < plane; ++i) d[i] = f[i] * k;
            }
        });
    }

    void mul(const Tensor& a, const Tensor& b, Tensor& y) override {
        size_t n = y.size(), block = 4096;
        parallel_for_each((n + block - 1) / block, [&](size_t blk) {
            size_t e = std::min(n, (blk + 1) * block);
            for (size_t i = blk * block; i < e; ++i) y.data()[i] = a.data()[i] * b.data()[i];
        });
    }

    void softmax(const Tensor& x, int groups, float temperature, Tensor& y) override {
        size_t per_sample = x.shape().sample(), gsize = per_sample / groups;
        parallel_for_each((size_t)x.shape().n * groups, [&](size_t ng) {
            const float* src = x.data() + ng * gsize;
            float* dst = y.data() + ng * gsize;
            float largest = -FLT_MAX, sum = 0;
            for (size_t i = 0; i < gsize; ++i) largest = std::max(largest, src[i]);
            for (size_t i = 0; i < gsize; ++i) {
                dst[i] = std::exp(src[i] / temperature - largest / temperature);
                sum += dst[i];
            }
            for (size_t i = 0; i < gsize; ++i) dst[i] /= sum;
        });
    }

    // kernels/yolo.h's yolo_activate_one, a channel plane at a time: the entry (x, y, w, h, objectness,
    // class) is fixed per plane, so the logistic runs vectorised (it was 10% of yolov7-tiny's forward).
    void yolo_activate(const Tensor& x, const YoloGeom& g, Tensor& y) override {
        using namespace simd;
        const Shape& s = x.shape();
        const int entries = 5 + g.classes;
        const size_t plane = s.plane();
        parallel_for_each((size_t)s.n * s.c, [&](size_t nc) {
            int entry = (int)(nc % s.c) % entries;
            bool logistic = !g.new_coords && entry != 2 && entry != 3, scaled = entry < 2;
            float k = g.scale_x_y, b = 0.5f * (g.scale_x_y - 1.0f);
            const float* src = x.data() + nc * plane;
            float* dst = y.data() + nc * plane;
            size_t i = 0;
            for (; i + VW <= plane; i += VW) {
                vec v = load(src + i);
                if (logistic) v = simd::activate(v, Activation::logistic);
                if (scaled) v = v * k - b;
                store(dst + i, v);
            }
            for (; i < plane; ++i) {
                float v = src[i];
                if (logistic) v = 1.0f / (1.0f + std::exp(-v));
                if (scaled) v = v * k - b;
                dst[i] = v;
            }
        });
    }

    // ---- training: implemented in training_ops.cpp ----
    void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw) override {
        cpu::conv2d_backward_weights(x, dy, g, dw, col_);
    }
    void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx) override {
        cpu::conv2d_backward_data(dy, w, g, dx, col_);
    }
    void bias_backward(const Tensor& dy, Tensor& db) override { cpu::bias_backward(dy, db.data()); }
    void batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale, const Tensor& bias,
                         float eps) override {
        cpu::batchnorm_train(y, mean.data(), var.data(), x_norm, scale.data(), bias.data(), eps);
    }
    void rolling_update(Tensor& rolling, const Tensor& batch_value, float keep) override {
        float* r = rolling.data();
        const float* b = batch_value.data();
        for (size_t i = 0; i < rolling.size(); ++i) r[i] = keep * r[i] + (1.0f - keep) * b[i];
    }
    void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                            Tensor& dscale, Tensor& dbias) override {
        cpu::batchnorm_backward(dy, x_norm, scale.data(), var.data(), eps, dscale.data(), dbias.data());
    }
    void activate_backward(const Tensor& x, Tensor& dy, Activation a) override { cpu::activate_backward(x, dy, a); }
    void maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) override {
        cpu::pool_backward(true, x, dy, g, dx);
    }
    void avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) override {
        cpu::pool_backward(false, x, dy, g, dx);
    }
    void avgpool_global_backward(const Tensor& dy, Tensor& dx) override { cpu::avgpool_global_backward(dy, dx); }
    void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
        cpu::maxpool_depth_backward(x, dy, dx);
    }
    void add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) override {
        cpu::add_channels(x, src_c0, y, dst_c0, count);
    }
    void shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                           ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                           const std::vector<Tensor*>& dfrom, Tensor* dweights) override {
        cpu::shortcut_backward(x, from, weights ? weights->data() : nullptr, wt, norm, dy, dx, dfrom,
                               dweights ? dweights->data() : nullptr);
    }
    void upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) override {
        cpu::upsample_backward(dy, stride, scale, dx);
    }
    void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) override {
        cpu::downsample_sum_backward(dy, stride, scale, dx);
    }
    void reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx) override {
        cpu::reorg_backward(dy, w, h, c, stride, forward, dx);
    }
    void scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                                 Tensor& dfrom) override {
        cpu::scale_channels_backward(s, from, scale_wh, dy, ds, dfrom);
    }
    void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) override {
        cpu::mul_backward(a, b, dy, da, db);
    }
    void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) override {
        cpu::softmax_backward(y, dy, groups, temperature, dx);
    }
    void add_scaled(const Tensor& x, float alpha, Tensor& y) override {
        require_same_size("add_scaled", x, y);
        const float* xp = x.data();
        float* yp = y.data();
        for (size_t i = 0; i < y.size(); ++i) yp[i] += alpha * xp[i];
    }
    void unscale_check(Tensor& grad, float factor, Tensor& found) override {
        float* g = grad.data();
        bool bad = false;
        for (size_t i = 0; i < grad.size(); ++i) {
            g[i] *= factor;
            bad |= !std::isfinite(g[i]);
        }
        if (bad) found.data()[0] = 1.0f;
    }
    void yolo_loss(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                   Tensor& delta, Tensor& stats) override {
        ThreadPool::instance().parallel_for(output.shape().n, [&](size_t b0, size_t b1) {
            yolo_loss_images(output, truths, anchors, a, delta, stats, (int)b0, (int)b1);
        });
    }
    void yolo_candidates(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a, Tensor& candidates,
                         Tensor& counts) override {
        ThreadPool::instance().parallel_for(output.shape().n, [&](size_t b0, size_t b1) {
            yolo_candidates_images(output, anchors, a, candidates, counts, (int)b0, (int)b1);
        });
    }
    void dropout_mask(Tensor& mask, float probability, uint64_t seed) override {
        float* m = mask.data();
        for (size_t i = 0; i < mask.size(); ++i)
            m[i] = dropout_scale((uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)i, probability);
    }
    void sgd_update(Tensor& w, Tensor& grad, Tensor& m, float lr, float momentum, float decay, int batch,
                    const Tensor* skip) override {
        cpu::sgd_update(w.data(), grad.data(), m.data(), w.size(), lr, momentum, decay, batch,
                        skip ? skip->data() : nullptr);
    }
    void adam_update(Tensor& w, Tensor& grad, Tensor& m, Tensor& v, float lr, float b1, float b2, float eps,
                     float decay, int batch, int t, const Tensor* skip) override {
        cpu::adam_update(w.data(), grad.data(), m.data(), v.data(), w.size(), lr, b1, b2, eps, decay, batch, t,
                         skip ? skip->data() : nullptr);
    }

private:
    // Winograd's transformed filters of each weights tensor, kept while the network's parameters keep
    // their version (Backend::params_version; 0 = unknown: none kept). Transforming them on every call
    // took a third of a 13x13 or 26x26 layer's time. Up to kKeptFilterBytes in all; layers past it
    // transform their filters on every call, as before.
    static constexpr size_t kKeptFilterBytes = size_t(512) << 20;
    struct Kept {
        std::weak_ptr<Buffer> of;
        uint64_t version = 0;
        WinogradFilters filters;
    };
    std::map<const Buffer*, Kept> kept_;
    WinogradFilters* kept_filters(const Tensor& w) {
        if (params_version_ == 0) return nullptr;
        auto it = kept_.find(w.buffer().get());
        if (it == kept_.end() || it->second.of.lock() != w.buffer()) {
            size_t bytes = 0;
            for (auto i = kept_.begin(); i != kept_.end();) {  // forget the filters of freed weights
                if (i->second.of.expired()) {
                    i = kept_.erase(i);
                    continue;
                }
                bytes += i->second.filters.u.size() * sizeof(float);
                ++i;
            }
            if (bytes + 4 * w.size() * sizeof(float) > kKeptFilterBytes) return nullptr;  // F(4,3): 36 / 9 = 4x
            it = kept_.insert_or_assign(w.buffer().get(), Kept{w.buffer(), params_version_, {}}).first;
        }
        Kept& k = it->second;
        WinogradFilters& f = k.filters;
        f.steady = k.version == params_version_ || f.u.empty();  // changed since the last call: training
        if (k.version != params_version_) k.version = params_version_, f.current = false;
        return &f;
    }
    std::vector<float> col_;  // im2col workspace of the training ops, reused across calls
    ConvWorkspace conv_ws_;   // padded input and transformed weights of cpu_conv2d, reused across calls
};

}  // namespace

// make_cpu_backend (backend.h) is cpu_isa.cpp's: it picks the copy whose new_cpu_backend to call
std::unique_ptr<Backend> new_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace DARKNET_ISA
}  // namespace dn
