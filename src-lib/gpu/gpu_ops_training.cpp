// GpuBackend's training ops: backward passes and batchnorm statistics, one or a few launches of
// the kernels in kernels/reduce.h and kernels/backward.h (launch geometry documented there).
// Reductions add in a fixed order (fixed trees within a group, splits combined in order):
// deterministic results.
#include <algorithm>

#include "../kernels/args_forward.h"
#include "../kernels/args_training.h"
#include "gpu_backend.h"

namespace dn {

namespace {
int32_t i32(size_t v) { return (int32_t)v; }

// How a per-channel reduction is split over the batch (kernels/reduce.h): enough groups to fill a
// large GPU (~1024) where there are few channels, each split a whole number of images, none empty.
ChannelSplitArgs channel_splits(const Shape& s) {
    const int target_groups = 1024;
    int splits = std::max(1, std::min(s.n, (target_groups + s.c - 1) / s.c));
    int per = (s.n + splits - 1) / splits;
    return ChannelSplitArgs{s.n, s.c, i32(s.plane()), (s.n + per - 1) / per};
}
}  // namespace

void GpuBackend::bias_backward(const Tensor& dy, Tensor& db) {
    const Shape& s = dy.shape();
    launch_groups("bias_backward_f32", s.c, {buf(dy), buf(db)}, BiasBackwardArgs{s.n, s.c, i32(s.plane())});
}

void GpuBackend::batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                 const Tensor& bias, float eps) {
    if (dev().batchnorm_train(nchw(y), eps, y.memory(), mean.memory(), var.memory(), x_norm.memory(), scale.memory(),
                              bias.memory()))
        return;
    const Shape& s = y.shape();
    BatchnormTrainArgs a{i32(y.size()), s.n, s.c, i32(s.plane()), eps};
    ChannelSplitArgs split = channel_splits(s);
    Tensor& partial = scratch(3, 2 * (size_t)s.c * split.splits);
    launch_groups("batchnorm_partial_stats_f32", (size_t)s.c * split.splits, {buf(y), buf(partial)}, split);
    launch("batchnorm_combine_stats_f32", s.c, {buf(partial), buf(mean), buf(var)}, split);
    launch("batchnorm_normalize_f32", y.size(), {buf(y), buf(x_norm), buf(mean), buf(var), buf(scale), buf(bias)}, a);
}

void GpuBackend::batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                                    Tensor& dscale, Tensor& dbias) {
    if (dev().batchnorm_backward(nchw(dy), eps, dy.memory(), x_norm.memory(), scale.memory(), var.memory(),
                                 dscale.memory(), dbias.memory()))
        return;
    // the per-channel sums (sum dy, sum dy * x_norm) pass from the reduction to the data gradient
    const Shape& s = dy.shape();
    Tensor& sums = scratch(1, 2 * (size_t)s.c);
    BatchnormTrainArgs a{i32(dy.size()), s.n, s.c, i32(s.plane()), eps};
    ChannelSplitArgs split = channel_splits(s);
    Tensor& partial = scratch(3, 2 * (size_t)s.c * split.splits);
    launch_groups("batchnorm_backward_partial_f32", (size_t)s.c * split.splits, {buf(dy), buf(x_norm), buf(partial)},
                  split);
    launch("batchnorm_backward_combine_f32", s.c, {buf(partial), buf(dscale), buf(dbias), buf(sums)}, split);
    launch("batchnorm_backward_data_f32", dy.size(), {buf(dy), buf(x_norm), buf(scale), buf(var), buf(sums)}, a);
}

void GpuBackend::activate_backward(const Tensor& x, Tensor& dy, Activation a) {
    const Shape& s = x.shape();
    if (a == Activation::linear) return;
    if (activation_is_elementwise(a))
        return launch("activate_backward_f32", dy.size(), {buf(x), buf(dy)}, ActivateBackwardArgs{i32(dy.size()), (int32_t)a});
    size_t n = (size_t)s.n * s.plane();
    launch("normalize_channels_backward_f32", n, {buf(x), buf(dy)},
           NormalizeChannelsBackwardArgs{i32(n), s.c, i32(s.plane()), a == Activation::normalize_channels_softmax});
}

static PoolArgs pool_backward_args(const Tensor& x, const Tensor& dy, const PoolGeom& g) {
    const Shape &xs = x.shape(), &ys = dy.shape();
    return PoolArgs{(int32_t)x.size(), xs.h, xs.w, ys.h, ys.w, g.size, g.stride_y, g.stride_x, g.padding};
}

void GpuBackend::maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    if (dev().pool_backward(pool_params(x, dy, g, true), x.memory(), dy.memory(), dx.memory())) return;
    PoolArgs a = pool_backward_args(x, dy, g);
    Tensor& winner = scratch(4, dy.size());  // int32 per window: kernels/backward.h
    launch("maxpool_argmax_f32", dy.size(), {buf(x), buf(winner)}, a);
    launch("maxpool_backward_f32", dx.size(), {buf(winner), buf(dy), buf(dx)}, a);
}

void GpuBackend::avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    if (dev().pool_backward(pool_params(x, dy, g, false), x.memory(), dy.memory(), dx.memory())) return;
    launch("avgpool_local_backward_f32", dx.size(), {buf(dy), buf(dx)}, pool_backward_args(x, dy, g));
}

void GpuBackend::avgpool_global_backward(const Tensor& dy, Tensor& dx) {
    launch("avgpool_global_backward_f32", dx.size(), {buf(dy), buf(dx)},
           AvgpoolGlobalBackwardArgs{i32(dx.size()), i32(dx.shape().plane())});
}

void GpuBackend::maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
    launch("maxpool_depth_backward_f32", dx.size(), {buf(x), buf(dy), buf(dx)},
           MaxpoolDepthArgs{i32(dx.size()), x.shape().c, dy.shape().c, i32(x.shape().plane())});
}

void GpuBackend::shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                                   ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                                   const std::vector<Tensor*>& dfrom, Tensor* dweights) {
    // one launch per input for its data gradient and, when weighted, one for the weight gradient
    const Shape& s = x.shape();
    const Tensor& w = weights ? *weights : dy;  // any buffer when unweighted: it is not read
    int inputs = (int)from.size() + 1;
    for (int k = 0; k < inputs; ++k) {
        const Tensor& in = k == 0 ? x : *from[k - 1];
        Tensor* din = k == 0 ? &dx : dfrom[k - 1];
        size_t from_sample = in.shape().sample(), m = std::min(s.sample(), from_sample);
        ShortcutBackwardArgs a{i32(s.n * m), s.n, i32(s.sample()), i32(from_sample), k, inputs, (int32_t)wt,
                               (int32_t)norm, s.c, i32(s.plane())};
        if (din) launch("shortcut_backward_f32", (size_t)a.n, {buf(w), buf(dy), buf(*din)}, a);
        if (weights && dweights && wt != ShortcutWeights::none)
            launch_groups("shortcut_weights_backward_f32", wt == ShortcutWeights::per_channel ? s.c : 1,
                          {buf(w), buf(dy), buf(in), buf(*dweights)}, a);
    }
}

static ResampleArgs resample_backward_args(const Tensor& dy, int stride, float scale, const Tensor& dx) {
    const Shape &xs = dx.shape(), &ys = dy.shape();
    return ResampleArgs{(int32_t)dx.size(), xs.w, xs.h, ys.w, ys.h, stride, scale};
}

void GpuBackend::upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    launch("upsample_backward_f32", dx.size(), {buf(dy), buf(dx)}, resample_backward_args(dy, stride, scale, dx));
}

void GpuBackend::downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    launch("downsample_sum_backward_f32", dx.size(), {buf(dy), buf(dx)}, resample_backward_args(dy, stride, scale, dx));
}

void GpuBackend::reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx) {
    if (c % (stride * stride) != 0)  // not a permutation: the kernel's index map assumes one
        return fallback("reorg_backward", [&](Backend& cpu, HostStage& hs) {
            cpu.reorg_backward(hs.in(dy), w, h, c, stride, forward, hs.inout(dx));
        });
    launch("reorg_backward_f32", dx.size(), {buf(dy), buf(dx)},
           ReorgArgs{i32(dx.size()), w, h, c, stride, forward ? 1 : 0});
}

void GpuBackend::scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                                         Tensor& dfrom) {
    const Shape& fs = from.shape();
    size_t groups = scale_wh ? (size_t)fs.n * fs.plane() : (size_t)fs.n * fs.c;
    launch_groups("scale_channels_backward_f32", groups, {buf(s), buf(from), buf(dy), buf(ds), buf(dfrom)},
                  ScaleChannelsBackwardArgs{fs.n, fs.c, i32(fs.plane()), scale_wh ? 1 : 0});
}

void GpuBackend::mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) {
    launch("mul_backward_f32", dy.size(), {buf(a), buf(b), buf(dy), buf(da), buf(db)}, MulBackwardArgs{i32(dy.size())});
}

void GpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) {
    const Shape& s = y.shape();
    launch_groups("softmax_backward_f32", (size_t)s.n * groups, {buf(y), buf(dy), buf(dx)},
                  SoftmaxBackwardArgs{groups, i32(s.sample() / groups), i32(s.sample()), temperature});
}

}  // namespace dn
