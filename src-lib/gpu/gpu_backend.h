// GpuBackend: every op of the contract (backend.h) on a Device (device.h). Which kernel runs, with
// which grid and group size, which temporaries, and what falls back to the CPU live here once;
// a device (OpenCL, CUDA, Metal) only allocates, copies and launches.
//
// The op implementations are split by family: gpu_ops_forward.cpp, gpu_ops_conv.cpp,
// gpu_ops_training.cpp, gpu_ops_yolo.cpp. An op without a kernel runs on the CPU backend with explicit copies
// (`fallback`), is counted, and is reported once on stderr; never a crash.
#pragma once
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "../backend.h"
#include "../kernels/args_forward.h"
#include "../kernels/args_training.h"
#include "device.h"

namespace dn {

// The host copies of one fallback op: inputs come down, outputs come down and go back up. A tensor
// passed twice (a shortcut's dx may be one of its dfrom) gets one host copy, so aliasing is kept.
class HostStage {
public:
    const Tensor& in(const Tensor& t) { return copy_of(t); }
    const Tensor* in(const Tensor* t) { return t ? &in(*t) : nullptr; }
    Tensor& inout(Tensor& t);
    Tensor* inout(Tensor* t) { return t ? &inout(*t) : nullptr; }
    void upload_outputs();

private:
    Tensor& copy_of(const Tensor& t);
    std::map<const Buffer*, std::unique_ptr<Tensor>> host_;  // device buffer -> its host copy
    std::map<const Buffer*, Tensor*> outputs_;               // device buffer -> the device tensor
};

// A tensor's shape as the device's vendor fast paths take it (device.h).
inline NchwShape nchw(const Tensor& t) {
    const Shape& s = t.shape();
    return NchwShape{s.n, s.c, s.h, s.w};
}
inline PoolParams pool_params(const Tensor& x, const Tensor& y, const PoolGeom& g, bool max) {
    return PoolParams{nchw(x), nchw(y), g.size, g.stride_y, g.stride_x, g.padding, max, x.dtype()};
}
// An NHWC tensor as the channel-wise kernels see it (tensor.h Layout): an NCHW tensor of N*H*W images
// of C channels of 1x1, in the same memory. Per-channel kernels (bias, affine, channel copies, the yolo
// entries) then run on it unchanged. An NCHW tensor is returned as it is.
inline Tensor channel_view(const Tensor& t) {
    if (t.layout() == Layout::nchw) return t;
    const Shape& s = t.shape();
    return Tensor(Shape{(int)((size_t)s.n * s.plane()), s.c, 1, 1}, t.buffer());
}

// Whether a shortcut of x and `from` sums elementwise in any layout: every input shaped like x and no
// per-channel weights (whose channel index the kernels take from NCHW order). Its kernels then take
// flat buffers, so NHWC tensors run unchanged (Layer::runs_channels_last of [shortcut] says the same).
inline bool shortcut_is_elementwise(const Tensor& x, const std::vector<const Tensor*>& from, ShortcutWeights wt) {
    if (wt == ShortcutWeights::per_channel) return false;
    for (const Tensor* f : from)
        if (!(f->shape() == x.shape())) return false;
    return true;
}

// The kernels' arguments of a pooling of x into y and of a resampling (upsample, downsample_sum) of x
// into y, in their layout (both alike, or DarknetError); n = the elements of y, or of x for the
// backward passes' one thread per input element (gpu_ops_forward.cpp).
PoolArgs pool_args(const Tensor& x, const PoolGeom& g, const Tensor& y, size_t n);
ResampleArgs resample_args(const Tensor& x, int stride, float scale, const Tensor& y, size_t n);

class GpuBackend final : public Backend {
public:
    explicit GpuBackend(std::shared_ptr<Device> device);
    const char* name() const override { return name_.c_str(); }
    std::shared_ptr<Device> device() const override { return device_; }
    Device& dev() const { return *device_; }

    // The ops run on the CPU, and the device's fast paths that failed and fell back to our kernels
    // ("mps_conv2d failed"), with their counts.
    const std::map<std::string, int>* fallback_counts() const override;

    // ---- storage types (gpu_ops_storage.cpp, src-lib/gpu/PRECISION.md) ----
    std::vector<DType> storage_types() const override { return device_->storage_types(); }
    Layout preferred_layout(DType t, int batch) const override { return device_->preferred_layout(t, batch); }
    void convert(const Tensor& x, Tensor& y) override;
    // The kernel of storage_kernels.h for storage type t: ("maxpool", f16) -> "maxpool_f16".
    static std::string storage_kernel(const char* base, DType t);
    // The storage type shared by tensors of one op; throws DarknetError naming op and both types otherwise.
    static DType same_storage(const char* op, std::initializer_list<const Tensor*> tensors);
    // Parameter p (fp32 NCHW master values) as a device tensor of storage type t and layout l: p itself
    // for fp32 NCHW, else a copy kept per parameter buffer and converted again on every call (one
    // elementwise pass over the parameter), so that changed values (training, load_weights, NumPy
    // views) are always seen. (Convolution weights [out, in, kh, kw] in NHWC: cuDNN's KRSC filters.)
    const Tensor& param_in(const Tensor& p, DType t, Layout l = Layout::nchw);
    // The layout shared by tensors of one op; throws DarknetError naming op and both layouts otherwise.
    static Layout same_layout(const char* op, std::initializer_list<const Tensor*> tensors);
    // y = x in y's layout, x and y of one storage type and size (the relayout kernel).
    void relayout(const Tensor& x, Tensor& y);
    // the arguments of the relayout kernels (storage_kernels.h) that move x into layout `to`
    static RelayoutArgs relayout_args(const Tensor& x, Layout to);
    // copy_channels and add_channels on NHWC tensors (their args from copy_args)
    void copy_channels_nhwc(const Tensor& x, Tensor& y, const CopyChannelsArgs& a);
    // The threads of an NHWC_PASS (kernels/layout_index.h) over `elements` values in rows of `channels`:
    // channels * ceil(rows / NHWC_PASS_ELEMENTS).
    static size_t nhwc_pass_threads(size_t elements, int channels) {
        size_t rows = elements / (size_t)channels;
        return (size_t)channels * ((rows + NHWC_PASS_ELEMENTS - 1) / NHWC_PASS_ELEMENTS);
    }
    // The threads of an NHWC_RUN (kernels/layout_index.h; the NHWC max pooling kernels) over
    // `elements` values in rows of `width` pixels of `channels`: channels * rows * ceil(width / NHWC_PASS_ELEMENTS).
    static size_t nhwc_run_threads(size_t elements, int channels, int width) {
        size_t rows = elements / ((size_t)channels * width);
        return (size_t)channels * rows * (((size_t)width + NHWC_PASS_ELEMENTS - 1) / NHWC_PASS_ELEMENTS);
    }
    // t in NCHW: t itself, or an NCHW copy in scratch slot `slot` (a copy of its contents when `copy`):
    // the way an op with no NHWC path of its own runs on NHWC tensors.
    Tensor nchw_scratch(const Tensor& t, int slot, bool copy);
    // x in fp32: x itself, or a copy widened into scratch slot 5 (the widenings' own slot), valid
    // until the next widening.
    Tensor widened(const Tensor& x);

    // Caps every kernel's group size (tests run each kernel at group sizes 1 .. 256: a kernel must
    // not depend on the group size the device happens to allow).
    void limit_group_size(uint32_t n) {
        group_limit_ = n ? n : 1;
        group_sizes_.clear();
    }
    // Whether kernel runs with groups of exactly n threads here (the 16x16 tiles of gemm_<type>).
    bool allows_group_size(const char* kernel, uint32_t n) { return group_size(kernel) >= n; }

    // ---- forward (gpu_ops_forward.cpp) ----
    void fill(Tensor& y, float value) override;
    void add_bias(Tensor& y, const Tensor& bias) override;
    void batchnorm_inference(Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& scale,
                             const Tensor& bias, float eps) override;
    void batchnorm_fold(const Tensor& scales, const Tensor& biases, const Tensor& mean, const Tensor& var, float eps,
                        Tensor& scale_out, Tensor& shift_out) override;
    void activate(Tensor& y, Activation a) override;
    void maxpool(const Tensor& x, const PoolGeom& g, Tensor& y) override;
    void avgpool_local(const Tensor& x, const PoolGeom& g, Tensor& y) override;
    void avgpool_global(const Tensor& x, Tensor& y) override;
    void maxpool_depth(const Tensor& x, Tensor& y) override;
    void copy_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) override;
    void shortcut(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights, ShortcutWeights wt,
                  ShortcutNorm norm, Tensor& y) override;
    void upsample(const Tensor& x, int stride, float scale, Tensor& y) override;
    void downsample_sum(const Tensor& x, int stride, float scale, Tensor& y) override;
    void reorg(const Tensor& x, int w, int h, int c, int stride, bool forward, Tensor& y) override;
    void scale_channels(const Tensor& s, const Tensor& from, bool scale_wh, Tensor& y) override;
    void mul(const Tensor& a, const Tensor& b, Tensor& y) override;
    void softmax(const Tensor& x, int groups, float temperature, Tensor& y) override;
    void yolo_activate(const Tensor& x, const YoloGeom& g, Tensor& y) override;
    void rolling_update(Tensor& rolling, const Tensor& batch_value, float keep) override;
    void dropout_mask(Tensor& mask, float probability, uint64_t seed) override;
    void sgd_update(Tensor& w, Tensor& grad, Tensor& m, float lr, float momentum, float decay, int batch,
                    const Tensor* skip) override;
    void adam_update(Tensor& w, Tensor& grad, Tensor& m, Tensor& v, float lr, float b1, float b2, float eps,
                     float decay, int batch, int t, const Tensor* skip) override;

    // ---- matrix products and convolution (gpu_ops_conv.cpp) ----
    void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const Tensor& A, int lda, const Tensor& B,
              int ldb, float beta, Tensor& C, int ldc) override;
    void conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, Tensor& y) override;
    void conv2d_affine_act(const Tensor& x, const Tensor& w, const ConvGeom& g, const Tensor* scale,
                           const Tensor& shift, Activation a, Tensor& y) override;
    void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw) override;
    void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx) override;

    // ---- training (gpu_ops_training.cpp) ----
    void bias_backward(const Tensor& dy, Tensor& db) override;
    void batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale, const Tensor& bias,
                         float eps) override;
    void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                            Tensor& dscale, Tensor& dbias) override;
    void activate_backward(const Tensor& x, Tensor& dy, Activation a) override;
    void batchnorm_activate_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                  const Tensor& bias, float eps, Activation a) override;
    void batchnorm_activate_backward(Tensor& dy, const Tensor& y, const Tensor& x_norm, const Tensor& scale,
                                     const Tensor& bias, const Tensor& var, float eps, Activation a, Tensor& dscale,
                                     Tensor& dbias) override;
    void maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) override;
    void avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) override;
    void avgpool_global_backward(const Tensor& dy, Tensor& dx) override;
    void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
    void add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) override;
    void shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                           ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                           const std::vector<Tensor*>& dfrom, Tensor* dweights) override;
    void upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) override;
    void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) override;
    void reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx) override;
    void scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                                 Tensor& dfrom) override;
    void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) override;
    void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) override;
    void add_scaled(const Tensor& x, float alpha, Tensor& y) override;
    void unscale_check(Tensor& grad, float factor, Tensor& found) override;

    // ---- the yolo loss (gpu_ops_yolo.cpp) ----
    void yolo_loss(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                   Tensor& delta, Tensor& stats) override;
    void yolo_candidates(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a, Tensor& candidates,
                         Tensor& counts) override;

    // ---- launching (used by the op files) ----
    // The kernel argument of tensor t, which must live on this backend's device and be fp32 NCHW.
    KernelArg buf(const Tensor& t) const;
    // The same for a kernel that takes t's storage type, whatever it is (storage_kernels.h); in NCHW
    // order (NCHW, or an NHWC tensor where the two orders agree: one channel, or 1x1 planes).
    KernelArg any_buf(const Tensor& t) const;
    // The same in either layout: for kernels that index elements flatly (elementwise) or are told the
    // layout (layout_index.h, channel_view, the NHWC batchnorm kernels). An op that has not been
    // written for NHWC takes any_buf, which refuses an NHWC tensor with a clear error, never garbage.
    KernelArg flat_buf(const Tensor& t) const;
    // One thread per element: `threads` rounded up to whole groups of the kernel's group size.
    template <class Args>
    void launch(const char* kernel, size_t threads, std::vector<KernelArg> args, const Args& a) {
        args.push_back(KernelArg::value(a));
        uint32_t group = group_size(kernel);
        device_->launch(kernel, LaunchDims{(uint32_t)((threads + group - 1) / group), group}, args);
    }
    // Exactly `groups` groups of a power-of-two size <= 256 (the reductions' threadgroup arrays).
    template <class Args>
    void launch_groups(const char* kernel, size_t groups, std::vector<KernelArg> args, const Args& a) {
        args.push_back(KernelArg::value(a));
        device_->launch(kernel, LaunchDims{(uint32_t)groups, reduction_group_size(kernel)}, args);
    }
    // a.chunks groups over each of `planes` planes of `plane` elements, about 8 elements a thread
    // (the kernels of FOR_PLANE_ELEMENTS, storage_training.h).
    template <class Args>
    void launch_planes(const char* kernel, size_t planes, size_t plane, std::vector<KernelArg> args, Args a) {
        uint32_t group = group_size(kernel);
        a.chunks = (int32_t)std::max<size_t>(1, (plane + 8 * group - 1) / (8 * group));
        args.push_back(KernelArg::value(a));
        device_->launch(kernel, LaunchDims{(uint32_t)(planes * (size_t)a.chunks), group}, args);
    }
    // Exactly `groups` groups of exactly 256 threads (kernels with fixed 16x16 tiles: gemm_<type>).
    template <class Args>
    void launch_tiles(const char* kernel, size_t groups, std::vector<KernelArg> args, const Args& a) {
        args.push_back(KernelArg::value(a));
        device_->launch(kernel, LaunchDims{(uint32_t)groups, 256}, args);
    }
    // Runs `op` on the CPU backend over host copies (see HostStage), counted under `name`.
    void fallback(const char* name, const std::function<void(Backend& cpu, HostStage& h)>& op);

    // A device temporary of at least n elements of dtype (and layout: what its buffer says it holds),
    // reused across calls (im2col columns etc.).
    Tensor& scratch(int slot, size_t n, DType dtype = DType::f32, Layout layout = Layout::nchw);

private:
    // batchnorm_train (a = linear) and batchnorm_activate_train; op: the name their errors give
    void batchnorm_train_act(const char* op, Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                             const Tensor& bias, float eps, Activation a);
    // What batchnorm_backward and batchnorm_activate_backward share after their partial sums (in
    // scratch slot 3): the combine into dscale, dbias, and dy's data gradient.
    void batchnorm_backward_finish(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                                   Tensor& dscale, Tensor& dbias, const ChannelSplitArgs& split);
    // conv2d_backward_weights of NHWC x and dy, not 1x1 (gpu_ops_conv.cpp)
    void conv2d_backward_weights_nhwc(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw);
    // What a device's half weight gradient was formed without and its add into the fp32 one puts back:
    // fp16's loss scale (gpu_ops_conv.cpp, half_dw_params), 1 otherwise
    float half_dw_scale(DType t) const;
    // batchnorm's per-channel reductions (partial sums, their combine) and elementwise passes in either
    // layout (gpu_ops_training.cpp)
    ChannelSplitArgs channel_partials(const char* base, const Tensor& like, std::vector<KernelArg> args, Activation act);
    void channel_combine(const char* base, const ChannelSplitArgs& split, std::vector<KernelArg> args);
    void channel_pass(const char* base, const Tensor& like, std::vector<KernelArg> args, BatchnormTrainArgs a);

    uint32_t group_size(const char* kernel);
    uint32_t reduction_group_size(const char* kernel);

    std::shared_ptr<Device> device_;
    std::string name_;
    std::unique_ptr<Backend> cpu_;          // for fallbacks, made on first use
    std::map<std::string, int> fallbacks_;
    mutable std::map<std::string, int> counts_;  // fallbacks_ and the device's failed fast paths
    std::map<std::string, uint32_t, std::less<>> group_sizes_;  // transparent: no string per launch
    uint32_t group_limit_ = 256;
    // by (slot, storage type, layout); a map, so that a new slot leaves references to the others valid
    std::map<std::tuple<int, DType, Layout>, Tensor> scratch_;
    // param_in's copies: by parameter buffer, with a weak reference that tells a freed buffer from a
    // new one at the same address
    struct ParamCopy {
        std::weak_ptr<Buffer> of;
        Tensor copy;
    };
    std::map<std::tuple<const Buffer*, DType, Layout>, ParamCopy> param_copies_;
    // Whether `derived`, made from parameters only, was made at the current params_version (then true:
    // it is kept); otherwise notes that the caller makes it now (false). Its buffer is the caller's own.
    bool derived_current(const Tensor& derived);
    struct DerivedAt {
        std::weak_ptr<Buffer> buffer;  // tells a freed buffer from a new one at the same address
        uint64_t version = 0;
    };
    std::map<const Buffer*, DerivedAt> derived_at_;
    // The optimizer kernels always read a skip flag: this zero one where the caller passes none.
    const Tensor& never_skip();
    Tensor never_skip_;
};

}  // namespace dn
