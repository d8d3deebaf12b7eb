// GpuBackend's training ops: backward passes and batchnorm statistics, one or a few launches of
// the kernels in kernels/reduce.h, kernels/backward.h and kernels/storage_training.h (launch
// geometry documented there). The ops of storage_training.h take activations and their gradients
// in the network's storage type (fp32, fp16, bf16; one per op, same_storage) and parameters,
// parameter gradients and statistics in fp32 (buf refuses anything else there): PRECISION.md.
// Reductions add in a fixed order (fixed trees within a group, splits combined in order):
// deterministic results.
#include <algorithm>

#include "../errors.h"
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
    return ChannelSplitArgs{s.n, s.c, i32(s.plane()), (s.n + per - 1) / per, 0, 0};
}

// The same for the NHWC kernels (storage_training.h): blocks of `lanes` channels, each split over the
// pixels; group_size = the kernel's (a power of two).
ChannelSplitArgs channel_splits_nhwc(const Shape& s, uint32_t group_size) {
    const int target_groups = 1024, lanes = (int)std::min<uint32_t>(group_size, 32);
    const int pixels = i32((size_t)s.n * s.plane()), blocks = (s.c + lanes - 1) / lanes;
    int splits = std::max(1, std::min(pixels, target_groups / blocks));
    int per = (pixels + splits - 1) / splits;
    return ChannelSplitArgs{pixels, s.c, 1, (pixels + per - 1) / per, 0, lanes};
}
}  // namespace

void GpuBackend::bias_backward(const Tensor& dy, Tensor& db) {
    // NHWC through channel_view: right, though each group then reads its channel `channels` apart (the
    // layers without batchnorm are the small heads)
    const Shape s = channel_view(dy).shape();
    launch_groups(storage_kernel("bias_backward", dy.dtype()).c_str(), s.c, {flat_buf(dy), buf(db)},
                  BiasBackwardArgs{s.n, s.c, i32(s.plane())});
}

void GpuBackend::batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                 const Tensor& bias, float eps) {
    batchnorm_train_act("batchnorm_train", y, mean, var, x_norm, scale, bias, eps, Activation::linear);
}

// The activation runs inside batchnorm_normalize (storage_training.h): no pass of its own.
void GpuBackend::batchnorm_activate_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                          const Tensor& bias, float eps, Activation a) {
    require_elementwise("batchnorm_activate_train", a);
    batchnorm_train_act("batchnorm_activate_train", y, mean, var, x_norm, scale, bias, eps, a);
}

// A per-channel reduction's first step over tensors shaped like `like` (kernels/reduce.h): the
// storage-type kernel `base`, or its NHWC twin (base_nhwc); args get the partial sums' scratch (slot 3)
// appended. Returns the split, which channel_combine then takes.
ChannelSplitArgs GpuBackend::channel_partials(const char* base, const Tensor& like, std::vector<KernelArg> args,
                                              Activation act) {
    const Shape& s = like.shape();
    const bool nhwc = like.layout() == Layout::nhwc;
    const std::string kernel = storage_kernel(nhwc ? (std::string(base) + "_nhwc").c_str() : base, like.dtype());
    ChannelSplitArgs split = nhwc ? channel_splits_nhwc(s, reduction_group_size(kernel.c_str())) : channel_splits(s);
    split.act = (int32_t)act;
    args.push_back(buf(scratch(3, 2 * (size_t)s.c * split.splits)));
    size_t blocks = nhwc ? (size_t)(s.c + split.lanes - 1) / split.lanes : (size_t)s.c;
    launch_groups(kernel.c_str(), blocks * split.splits, args, split);
    return split;
}

// The second step, over channel_partials' partial sums (scratch slot 3, bound first): base_f32, one
// thread per channel over the splits; or over NHWC's many splits (split.lanes set) base_tree_f32, a
// group per channel.
void GpuBackend::channel_combine(const char* base, const ChannelSplitArgs& split, std::vector<KernelArg> args) {
    args.insert(args.begin(), buf(scratch(3, 0)));
    if (split.lanes)
        launch_groups((std::string(base) + "_tree_f32").c_str(), (size_t)split.channels, args, split);
    else
        launch((std::string(base) + "_f32").c_str(), (size_t)split.channels, args, split);
}

// An elementwise batchnorm pass over tensors shaped like `like`: groups over each (sample, channel)
// plane (NCHW, launch_planes), or an NHWC_PASS (the _nhwc twin, kernels/layout_index.h).
void GpuBackend::channel_pass(const char* base, const Tensor& like, std::vector<KernelArg> args, BatchnormTrainArgs a) {
    const Shape& s = like.shape();
    if (like.layout() == Layout::nchw)
        return launch_planes(storage_kernel(base, like.dtype()).c_str(), (size_t)s.n * s.c, s.plane(), args, a);
    launch(storage_kernel((std::string(base) + "_nhwc").c_str(), like.dtype()).c_str(),
           nhwc_pass_threads(like.size(), s.c), args, a);
}

void GpuBackend::batchnorm_train_act(const char* op, Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm,
                                     const Tensor& scale, const Tensor& bias, float eps, Activation act) {
    DType t = same_storage(op, {&y, &x_norm});
    same_layout(op, {&y, &x_norm});
    // the device's own path (MPSGraph on Metal) takes fp32 NCHW data only, and has no activation: then a
    // pass of its own
    if (t == DType::f32 && y.layout() == Layout::nchw &&
        dev().batchnorm_train(nchw(y), eps, y.memory(), mean.memory(), var.memory(), x_norm.memory(), scale.memory(),
                              bias.memory()))
        return activate(y, act);
    const Shape& s = y.shape();
    ChannelSplitArgs split = channel_partials("batchnorm_partial_stats", y, {flat_buf(y)}, Activation::linear);
    channel_combine("batchnorm_combine_stats", split, {buf(mean), buf(var)});
    channel_pass("batchnorm_normalize", y, {flat_buf(y), flat_buf(x_norm), buf(mean), buf(var), buf(scale), buf(bias)},
                 BatchnormTrainArgs{s.n, s.c, i32(s.plane()), eps, (int32_t)act, 1});
}

void GpuBackend::batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                                    Tensor& dscale, Tensor& dbias) {
    DType t = same_storage("batchnorm_backward", {&dy, &x_norm});
    same_layout("batchnorm_backward", {&dy, &x_norm});
    if (t == DType::f32 && dy.layout() == Layout::nchw &&
        dev().batchnorm_backward(nchw(dy), eps, dy.memory(), x_norm.memory(), scale.memory(), var.memory(),
                                 dscale.memory(), dbias.memory()))
        return;
    ChannelSplitArgs split =
        channel_partials("batchnorm_backward_partial", dy, {flat_buf(dy), flat_buf(x_norm)}, Activation::linear);
    batchnorm_backward_finish(dy, x_norm, scale, var, eps, dscale, dbias, split);
}

// The activation's gradient is applied in the partial sums' pass (storage_training.h), which leaves
// dy = dL/d(batchnorm output) behind: activate_backward's pass is saved, and for the activations that
// need their input (mish, swish, ...) the pre-activation copy and its pass in the forward too.
void GpuBackend::batchnorm_activate_backward(Tensor& dy, const Tensor& y, const Tensor& x_norm, const Tensor& scale,
                                             const Tensor& bias, const Tensor& var, float eps, Activation a,
                                             Tensor& dscale, Tensor& dbias) {
    require_elementwise("batchnorm_activate_backward", a);
    if (a == Activation::linear) return batchnorm_backward(dy, x_norm, scale, var, eps, dscale, dbias);
    DType t = same_storage("batchnorm_activate_backward", {&dy, &y, &x_norm});
    same_layout("batchnorm_activate_backward", {&dy, &y, &x_norm});
    ChannelSplitArgs split = channel_partials("batchnorm_activate_backward_partial", dy,
                                              {flat_buf(dy), flat_buf(y), flat_buf(x_norm), buf(scale), buf(bias)}, a);
    // A device with its own batchnorm backward (MPSGraph on Metal, fp32 NCHW) takes it from the gradient
    // left in dy (the partial sums just taken are then unused: one reduction more than the composition)
    if (t == DType::f32 && dy.layout() == Layout::nchw &&
        dev().batchnorm_backward(nchw(dy), eps, dy.memory(), x_norm.memory(), scale.memory(), var.memory(),
                                 dscale.memory(), dbias.memory()))
        return;
    batchnorm_backward_finish(dy, x_norm, scale, var, eps, dscale, dbias, split);
}

void GpuBackend::batchnorm_backward_finish(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var,
                                           float eps, Tensor& dscale, Tensor& dbias, const ChannelSplitArgs& split) {
    // the per-channel sums (sum dy, sum dy * x_norm) pass from the reduction to the data gradient
    const Shape& s = dy.shape();
    Tensor& sums = scratch(1, 2 * (size_t)s.c);
    channel_combine("batchnorm_backward_combine", split, {buf(dscale), buf(dbias), buf(sums)});
    channel_pass("batchnorm_backward_data", dy, {flat_buf(dy), flat_buf(x_norm), buf(scale), buf(var), buf(sums)},
                 BatchnormTrainArgs{s.n, s.c, i32(s.plane()), eps, 0, 1});
}

void GpuBackend::activate_backward(const Tensor& x, Tensor& dy, Activation a) {
    const Shape& s = x.shape();
    DType t = same_storage("activate_backward", {&x, &dy});
    if (a == Activation::linear) return;
    if (activation_is_elementwise(a))
        return launch(storage_kernel("activate_backward", t).c_str(), dy.size(), {flat_buf(x), flat_buf(dy)},
                      ActivateBackwardArgs{i32(dy.size()), (int32_t)a});
    size_t n = (size_t)s.n * s.plane();
    launch(storage_kernel("normalize_channels_backward", t).c_str(), n, {any_buf(x), any_buf(dy)},
           NormalizeChannelsBackwardArgs{i32(n), s.c, i32(s.plane()), a == Activation::normalize_channels_softmax});
}

void GpuBackend::maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    DType t = same_storage("maxpool_backward", {&x, &dy, &dx});
    PoolArgs a = pool_args(x, g, dy, x.size());
    same_layout("maxpool_backward", {&x, &dx});
    if (!a.nhwc && dev().pool_backward(pool_params(x, dy, g, true), x.memory(), dy.memory(), dx.memory())) return;
    // NHWC: the _nhwc twins, NHWC_RUNs (kernels/layout_index.h) over dy's or dx's rows
    const std::string twin = a.nhwc ? "_nhwc" : "";
    size_t over_dy = a.nhwc ? nhwc_run_threads(dy.size(), a.channels, a.out_w) : dy.size();
    size_t over_dx = a.nhwc ? nhwc_run_threads(dx.size(), a.channels, a.in_w) : dx.size();
    if (g.stride_x >= g.size && g.stride_y >= g.size) {  // windows that do not overlap: one pass
        launch(storage_kernel(("maxpool_backward_disjoint" + twin).c_str(), t).c_str(), over_dy,
               {flat_buf(x), flat_buf(dy), flat_buf(dx)}, a);
        return;
    }
    Tensor& winner = scratch(4, dy.size());  // int32 per window (in dy's layout): kernels/backward.h
    launch(storage_kernel(("maxpool_argmax" + twin).c_str(), t).c_str(), over_dy, {flat_buf(x), buf(winner)}, a);
    launch(storage_kernel(("maxpool_backward" + twin).c_str(), t).c_str(), over_dx,
           {buf(winner), flat_buf(dy), flat_buf(dx)}, a);
}

void GpuBackend::avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    DType t = same_storage("avgpool_local_backward", {&x, &dy, &dx});
    PoolArgs a = pool_args(x, g, dy, x.size());
    same_layout("avgpool_local_backward", {&x, &dx});
    if (!a.nhwc && dev().pool_backward(pool_params(x, dy, g, false), x.memory(), dy.memory(), dx.memory())) return;
    launch(storage_kernel("avgpool_local_backward", t).c_str(), dx.size(), {flat_buf(dy), flat_buf(dx)}, a);
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
    DType t = same_storage("shortcut_backward", {&x, &dy, &dx});
    const std::string data_kernel = storage_kernel("shortcut_backward", t);
    const std::string weights_kernel = storage_kernel("shortcut_weights_backward", t);
    const bool flat = shortcut_is_elementwise(x, from, wt);
    auto arg = [&](const Tensor& v) { return flat ? flat_buf(v) : any_buf(v); };
    int inputs = (int)from.size() + 1;
    for (int k = 0; k < inputs; ++k) {
        const Tensor& in = k == 0 ? x : *from[k - 1];
        Tensor* din = k == 0 ? &dx : dfrom[k - 1];
        same_storage("shortcut_backward", {&x, &in});
        if (din) same_storage("shortcut_backward", {&x, din});
        if (flat) same_layout("shortcut_backward", {&x, &in, &dy, din ? din : &dy});
        size_t from_sample = in.shape().sample(), m = std::min(s.sample(), from_sample);
        ShortcutBackwardArgs a{i32(s.n * m), s.n, i32(s.sample()), i32(from_sample), k, inputs, (int32_t)wt,
                               (int32_t)norm, s.c, i32(s.plane())};
        if (din) launch(data_kernel.c_str(), (size_t)a.n, {weights ? buf(w) : flat_buf(w), arg(dy), arg(*din)}, a);
        if (weights && dweights && wt != ShortcutWeights::none)
            launch_groups(weights_kernel.c_str(), wt == ShortcutWeights::per_channel ? s.c : 1,
                          {buf(w), arg(dy), arg(in), buf(*dweights)}, a);
    }
}

void GpuBackend::upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    launch(storage_kernel("upsample_backward", same_storage("upsample_backward", {&dy, &dx})).c_str(), dx.size(),
           {flat_buf(dy), flat_buf(dx)}, resample_args(dx, stride, scale, dy, dx.size()));
}

void GpuBackend::downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    launch("downsample_sum_backward_f32", dx.size(), {buf(dy), buf(dx)}, resample_args(dx, stride, scale, dy, dx.size()));
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

void GpuBackend::add_scaled(const Tensor& x, float alpha, Tensor& y) {
    require_same_size("add_scaled", x, y);
    // the kernel reads x in fp32 and y's layout: a half x is widened first, an NCHW one into NHWC y
    // moved (the [yolo] delta, the common case, is fp32 NCHW)
    Tensor wide = widened(x);
    if (wide.layout() != y.layout()) {
        Tensor moved(wide.shape(), scratch(7, wide.size(), DType::f32, y.layout()).buffer());
        relayout(wide, moved);
        wide = moved;
    }
    launch(storage_kernel("add_scaled", y.dtype()).c_str(), y.size(), {flat_buf(y), flat_buf(wide)},
           ScaledArgs{i32(y.size()), alpha});
}

void GpuBackend::unscale_check(Tensor& grad, float factor, Tensor& found) {
    launch("unscale_check_f32", grad.size(), {buf(grad), buf(found)}, UnscaleArgs{i32(grad.size()), factor});
}

}  // namespace dn
