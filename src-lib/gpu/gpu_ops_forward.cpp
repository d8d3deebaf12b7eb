// GpuBackend's forward, elementwise and optimizer ops: one launch each of the kernels in
// kernels/forward_elementwise.h and kernels/forward_layout.h (launch geometry documented there).
#include <cmath>

#include "../kernels/args_forward.h"
#include "gpu_backend.h"

namespace dn {

namespace {
int32_t i32(size_t v) { return (int32_t)v; }
}  // namespace

void GpuBackend::fill(Tensor& y, float value) {
    // 0.0f is all zero bits in fp32, fp16 and bf16 alike
    if (value == 0.0f && !std::signbit(value) &&
        device_->zero(flat_buf(y).buffer, y.size() * dtype_size(y.dtype())))
        return;
    launch(storage_kernel("fill", y.dtype()).c_str(), y.size(), {flat_buf(y)}, FillArgs{i32(y.size()), value});
}

void GpuBackend::add_bias(Tensor& y, const Tensor& bias) {
    const Shape s = channel_view(y).shape();
    launch(storage_kernel("add_bias", y.dtype()).c_str(), y.size(), {flat_buf(y), buf(bias)},
           ChannelArgs{i32(y.size()), s.c, i32(s.plane())});
}

void GpuBackend::batchnorm_inference(Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& scale,
                                     const Tensor& bias, float eps) {
    const Shape& s = y.shape();
    launch("batchnorm_inference_f32", y.size(), {buf(y), buf(mean), buf(var), buf(scale), buf(bias)},
           BatchnormArgs{i32(y.size()), s.c, i32(s.plane()), eps});
}

void GpuBackend::batchnorm_fold(const Tensor& scales, const Tensor& biases, const Tensor& mean, const Tensor& var,
                                float eps, Tensor& scale_out, Tensor& shift_out) {
    if (derived_current(scale_out)) return;  // the same parameters folded into the same tensors (a layer's own)
    launch("batchnorm_fold_f32", scales.size(), {buf(scale_out), buf(shift_out), buf(scales), buf(biases), buf(mean), buf(var)},
           BatchnormFoldArgs{i32(scales.size()), eps});
}

void GpuBackend::activate(Tensor& y, Activation a) {
    const Shape& s = y.shape();
    if (a == Activation::linear) return;
    if (activation_is_elementwise(a))
        launch(storage_kernel("activate", y.dtype()).c_str(), y.size(), {flat_buf(y)}, ActivateArgs{i32(y.size()), (int32_t)a});
    else
        launch("normalize_channels_f32", (size_t)s.n * s.plane(), {buf(y)},
               NormalizeChannelsArgs{i32((size_t)s.n * s.plane()), s.c, i32(s.plane()), (int32_t)a});
}

PoolArgs pool_args(const Tensor& x, const PoolGeom& g, const Tensor& y, size_t n) {
    const Shape &xs = x.shape(), &ys = y.shape();
    return PoolArgs{(int32_t)n, xs.h, xs.w, ys.h, ys.w, g.size, g.stride_y, g.stride_x, g.padding, xs.c,
                    GpuBackend::same_layout("pooling", {&x, &y}) == Layout::nhwc ? 1 : 0};
}

void GpuBackend::maxpool(const Tensor& x, const PoolGeom& g, Tensor& y) {
    DType t = same_storage("maxpool", {&x, &y});
    PoolArgs a = pool_args(x, g, y, y.size());
    if (a.nhwc)  // a thread per channel of a run of output pixels (kernels/layout_index.h, NHWC_RUN)
        return launch(storage_kernel("maxpool_nhwc", t).c_str(), nhwc_run_threads(y.size(), a.channels, a.out_w),
                      {flat_buf(y), flat_buf(x)}, a);
    if (dev().pool(pool_params(x, y, g, true), x.memory(), y.memory())) return;  // MPS: NCHW
    launch(storage_kernel("maxpool", t).c_str(), y.size(), {flat_buf(y), flat_buf(x)}, a);
}

void GpuBackend::avgpool_local(const Tensor& x, const PoolGeom& g, Tensor& y) {
    DType t = same_storage("avgpool_local", {&x, &y});
    PoolArgs a = pool_args(x, g, y, y.size());
    if (!a.nhwc && dev().pool(pool_params(x, y, g, false), x.memory(), y.memory())) return;
    launch(storage_kernel("avgpool_local", t).c_str(), y.size(), {flat_buf(y), flat_buf(x)}, a);
}

void GpuBackend::avgpool_global(const Tensor& x, Tensor& y) {
    const Shape& s = x.shape();
    launch_groups("avgpool_global_f32", (size_t)s.n * s.c, {buf(y), buf(x)}, GlobalPoolArgs{i32(s.plane())});
}

void GpuBackend::maxpool_depth(const Tensor& x, Tensor& y) {
    launch("maxpool_depth_f32", y.size(), {buf(y), buf(x)},
           MaxpoolDepthArgs{i32(y.size()), x.shape().c, y.shape().c, i32(x.shape().plane())});
}

// In NHWC through channel_view: per pixel, channels [src_c0, src_c0 + count) are one run of x and of y
// (plane 1, n = pixels * count).
static CopyChannelsArgs copy_args(const Tensor& x, int src_c0, const Tensor& y, int dst_c0, int count, bool add) {
    GpuBackend::same_layout(add ? "add_channels" : "copy_channels", {&x, &y});
    const Shape xs = channel_view(x).shape();
    size_t n = (size_t)xs.n * count * xs.plane();
    return CopyChannelsArgs{(int32_t)n, (int32_t)xs.plane(), count, xs.c, src_c0, y.shape().c, dst_c0, add ? 1 : 0};
}

// NHWC: copy_channels_nhwc (rows of a few channels: cudaMemcpy2D took 2.7x the bytes' time for them)
void GpuBackend::copy_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) {
    CopyChannelsArgs a = copy_args(x, src_c0, y, dst_c0, count, false);
    DType t = same_storage("copy_channels", {&x, &y});
    if (x.layout() == Layout::nhwc) return copy_channels_nhwc(x, y, a);
    // per image, channels [src_c0, src_c0 + count) are one contiguous run in x and in y
    size_t plane = dtype_size(t) * x.shape().plane();
    if (device_->copy_rows(flat_buf(x).buffer, plane * src_c0, plane * x.shape().c, flat_buf(y).buffer, plane * dst_c0,
                           plane * y.shape().c, plane * count, x.shape().n))
        return;
    launch(storage_kernel("copy_channels", t).c_str(), (size_t)a.n, {flat_buf(y), flat_buf(x)}, a);
}

void GpuBackend::add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) {
    CopyChannelsArgs a = copy_args(x, src_c0, y, dst_c0, count, true);
    DType t = same_storage("add_channels", {&x, &y});
    if (x.layout() == Layout::nhwc) return copy_channels_nhwc(x, y, a);
    launch(storage_kernel("copy_channels", t).c_str(), (size_t)a.n, {flat_buf(y), flat_buf(x)}, a);
}

void GpuBackend::copy_channels_nhwc(const Tensor& x, Tensor& y, const CopyChannelsArgs& a) {
    if (a.n == 0) return;
    launch(storage_kernel("copy_channels_nhwc", x.dtype()).c_str(), nhwc_pass_threads(a.n, a.count),
           {flat_buf(y), flat_buf(x)}, a);
}

void GpuBackend::shortcut(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                          ShortcutWeights wt, ShortcutNorm norm, Tensor& y) {
    // one launch per input (kernels/forward_layout.h): y = w0 * x, then y += w_k * from[k-1]
    const Shape& s = x.shape();
    const Tensor& w = weights ? *weights : y;  // any buffer when unweighted: it is not read (flat_buf: any layout)
    const std::string kernel = storage_kernel("shortcut", same_storage("shortcut", {&x, &y}));
    const bool flat = shortcut_is_elementwise(x, from, wt);
    if (flat && from.size() == 1 && wt == ShortcutWeights::none) {  // y = x + from: one pass
        same_storage("shortcut", {&x, from[0]});
        same_layout("shortcut", {&x, from[0], &y});
        return launch(storage_kernel("shortcut_add", y.dtype()).c_str(),
                      (y.size() + NHWC_PASS_ELEMENTS - 1) / NHWC_PASS_ELEMENTS,
                      {flat_buf(y), flat_buf(x), flat_buf(*from[0])}, CountArgs{i32(y.size())});
    }
    int inputs = (int)from.size() + 1;
    for (int k = 0; k < inputs; ++k) {
        const Tensor& in = k == 0 ? x : *from[k - 1];
        same_storage("shortcut", {&x, &in});
        if (flat) same_layout("shortcut", {&x, &in, &y});
        ShortcutArgs a{i32(y.size()), i32(s.sample()), i32(in.shape().sample()), k, inputs, (int32_t)wt,
                       (int32_t)norm, s.c, i32(s.plane())};
        launch(kernel.c_str(), y.size(), {flat ? flat_buf(y) : any_buf(y), flat ? flat_buf(in) : any_buf(in),
                                          weights ? buf(w) : flat_buf(w)}, a);
    }
}

ResampleArgs resample_args(const Tensor& x, int stride, float scale, const Tensor& y, size_t n) {
    const Shape &xs = x.shape(), &ys = y.shape();
    return ResampleArgs{(int32_t)n, xs.w, xs.h, ys.w, ys.h, stride, scale, xs.c,
                        GpuBackend::same_layout("resampling", {&x, &y}) == Layout::nhwc ? 1 : 0};
}

void GpuBackend::upsample(const Tensor& x, int stride, float scale, Tensor& y) {
    launch(storage_kernel("upsample", same_storage("upsample", {&x, &y})).c_str(), y.size(), {flat_buf(y), flat_buf(x)},
           resample_args(x, stride, scale, y, y.size()));
}

void GpuBackend::downsample_sum(const Tensor& x, int stride, float scale, Tensor& y) {
    launch("downsample_sum_f32", y.size(), {buf(y), buf(x)}, resample_args(x, stride, scale, y, y.size()));
}

void GpuBackend::reorg(const Tensor& x, int w, int h, int c, int stride, bool forward, Tensor& y) {
    // the kernel maps each element once when c divides by stride^2 (every cfg the layers accept)
    if (c % (stride * stride) != 0)
        return fallback("reorg", [&](Backend& cpu, HostStage& hs) {
            cpu.reorg(hs.in(x), w, h, c, stride, forward, hs.inout(y));
        });
    launch("reorg_f32", x.size(), {buf(y), buf(x)}, ReorgArgs{i32(x.size()), w, h, c, stride, forward ? 1 : 0});
}

void GpuBackend::scale_channels(const Tensor& s, const Tensor& from, bool scale_wh, Tensor& y) {
    const Shape& fs = from.shape();
    launch("scale_channels_f32", y.size(), {buf(y), buf(s), buf(from)},
           ScaleChannelsArgs{i32(y.size()), fs.c, i32(fs.plane()), scale_wh ? 1 : 0});
}

void GpuBackend::mul(const Tensor& a, const Tensor& b, Tensor& y) {
    launch("mul_f32", y.size(), {buf(y), buf(a), buf(b)}, CountArgs{i32(y.size())});
}

void GpuBackend::softmax(const Tensor& x, int groups, float temperature, Tensor& y) {
    const Shape& s = x.shape();
    size_t n = (size_t)s.n * groups;
    launch("softmax_f32", n, {buf(y), buf(x)},
           SoftmaxArgs{i32(n), groups, i32(s.sample() / groups), i32(s.sample()), temperature});
}

void GpuBackend::yolo_activate(const Tensor& x_in, const YoloGeom& g, Tensor& y) {
    // x in any storage type and layout, y fp32 NCHW: the heads are decoded and given to the loss so
    const Tensor x = nchw_scratch(x_in, 6, true);
    const Shape& s = x.shape();
    launch(storage_kernel("yolo_activate", x.dtype()).c_str(), y.size(), {buf(y), any_buf(x)},
           YoloActivateArgs{i32(y.size()), i32(s.plane()), 5 + g.classes, g.new_coords ? 1 : 0, g.scale_x_y});
}

void GpuBackend::rolling_update(Tensor& rolling, const Tensor& batch_value, float keep) {
    launch("rolling_update_f32", rolling.size(), {buf(rolling), buf(batch_value)}, RollingArgs{i32(rolling.size()), keep});
}

void GpuBackend::dropout_mask(Tensor& mask, float probability, uint64_t seed) {
    launch("dropout_mask_f32", mask.size(), {buf(mask)},
           DropoutArgs{i32(mask.size()), (uint32_t)seed, (uint32_t)(seed >> 32), probability});
}

void GpuBackend::sgd_update(Tensor& w, Tensor& grad, Tensor& m, float lr, float momentum, float decay, int batch,
                            const Tensor* skip) {
    launch("sgd_update_f32", w.size(), {buf(w), buf(grad), buf(m), buf(skip ? *skip : never_skip())},
           SgdArgs{i32(w.size()), batch, lr, momentum, decay});
}

void GpuBackend::adam_update(Tensor& w, Tensor& grad, Tensor& m, Tensor& v, float lr, float b1, float b2, float eps,
                             float decay, int batch, int t, const Tensor* skip) {
    launch("adam_update_f32", w.size(), {buf(w), buf(grad), buf(m), buf(v), buf(skip ? *skip : never_skip())},
           AdamArgs{i32(w.size()), batch, t, lr, b1, b2, eps, decay});
}

const Tensor& GpuBackend::never_skip() {
    if (never_skip_.size() != 1) {
        never_skip_ = alloc(Shape{1, 1, 1, 1});
        fill(never_skip_, 0.0f);
    }
    return never_skip_;
}

}  // namespace dn
