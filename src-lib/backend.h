// The op contract (after ggml): layers express forward passes as calls of these ops.
// Every backend implements every op with the same meaning; `reference` is the naive oracle,
// `cpu` is the fast one. src-test/test_ops.py compares them op by op.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "activation.h"
#include "errors.h"
#include "tensor.h"

namespace dn {

// Convolution geometry, Darknet's conventions: output = (in + 2*pad - dilation*(k-1) - 1) / stride + 1.
struct ConvGeom {
    int kh = 1, kw = 1;
    int stride_y = 1, stride_x = 1;
    int pad = 0;
    int dilation = 1;
    int groups = 1;
};

// Pooling geometry: output = (in + padding - size) / stride + 1, window starts at -padding/2.
struct PoolGeom {
    int size = 2;
    int stride_y = 2, stride_x = 2;
    int padding = 1;
};

enum class ShortcutWeights { none, per_feature, per_channel };
enum class ShortcutNorm { none, relu, softmax };

// The yolo loss's head geometry and [yolo] options (kernels/yolo_loss.h, shared with the kernels).
struct YoloLossArgs;
// Detection's decode of one head (kernels/yolo_decode.h).
struct YoloDecodeArgs;

struct YoloGeom {
    int anchors = 3;       // anchors used by this head (len(mask))
    int classes = 80;
    bool new_coords = false;
    float scale_x_y = 1.0f;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual const char* name() const = 0;

    // ---- memory: where this backend's tensors live ---------------------------------------------
    // The device whose memory holds this backend's tensors; null = host memory (cpu, reference).
    virtual std::shared_ptr<Device> device() const { return nullptr; }
    // A tensor in this backend's memory (zeroed on the host, unspecified on a device).
    Tensor alloc(Shape s, DType dtype = DType::f32, Layout layout = Layout::nchw) const {
        return Tensor(s, std::make_shared<Buffer>(device(), s.size(), dtype, layout));
    }
    // Gives t shape s, storage type dtype and layout in this backend's memory; reallocates only when t
    // lives elsewhere, has another storage type or layout, or is too small.
    void resize(Tensor& t, Shape s, DType dtype = DType::f32, Layout layout = Layout::nchw) const {
        if (t.buffer() && t.device() == device().get() && t.dtype() == dtype && t.layout() == layout) t.resize(s);
        else t = alloc(s, dtype, layout);
    }
    // The layout this backend's ops run fastest on for a pass of `batch` images in storage type t: NCHW
    // on the host; NHWC where a device's tensor-core convolutions want it (src-lib/gpu/PRECISION.md,
    // "Layout").
    // Ops take either on a GPU device; Network keeps its activations in this one.
    virtual Layout preferred_layout(DType t, int batch) const {
        (void)t, (void)batch;
        return Layout::nchw;
    }

    // ---- storage types (src-lib/gpu/PRECISION.md) ----------------------------------------------
    // The storage types this backend's ops take: fp32 everywhere; fp16 / bf16 on GPU devices that
    // run them. An op given a tensor in another type throws DarknetError naming it.
    virtual std::vector<DType> storage_types() const { return {DType::f32}; }
    // y = x converted to y's storage type and layout (same size). The host backends hold fp32 NCHW
    // only: a copy.
    virtual void convert(const Tensor& x, Tensor& y) { copy_tensor(x, y); }
    // Which version of the network's parameter values the ops see (Network::own_params advances it
    // before every write of them); 0, the default, is "unknown". A device backend keeps what it derives
    // from parameters (param_in's half copies, batchnorm_fold's scale and shift) while the version it
    // derived them at is current and not 0: an inference pass then runs none of those kernels (a
    // batch-1 forward of yolov4-tiny in bf16 ran 41 of its 131 there). Host backends derive nothing
    // (their parameters are live NumPy views, written without notice).
    void set_params_version(uint64_t v) { params_version_ = v; }
    uint64_t params_version() const { return params_version_; }
    // The factor the activations' gradients of the backward now running carry: fp16 training's loss
    // scale, else 1 (Network::backward sets it). An op that forms a half sum over many of them divides it
    // out first and multiplies it back in fp32 (GpuBackend::conv2d_backward_weights through cuDNN).
    void set_gradient_scale(float s) { gradient_scale_ = s; }
    // t in this backend's memory: t itself when it is there already, otherwise a copy.
    Tensor adopt(const Tensor& t) const {
        if (t.buffer() && t.device() == device().get()) return t;
        Tensor r = alloc(t.shape());
        copy_tensor(t, r);
        return r;
    }

    // How often each op ran on the CPU instead of this backend's device (GPU backends; null here).
    virtual const std::map<std::string, int>* fallback_counts() const { return nullptr; }

    // y[i] = value for every element
    virtual void fill(Tensor& y, float value) = 0;

    // C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, on whole tensors.
    virtual void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const Tensor& A, int lda,
                      const Tensor& B, int ldb, float beta, Tensor& C, int ldc) = 0;

    // y = conv(x, w); w is [out_c, in_c/groups, kh, kw]. No bias.
    virtual void conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, Tensor& y) = 0;
    // y = act(conv(x, w) * scale[c] + shift[c]); scale may be null (= 1). The inference path of
    // [convolutional]: batchnorm becomes a per-channel affine that a backend can fuse into its GEMM epilogue.
    virtual void conv2d_affine_act(const Tensor& x, const Tensor& w, const ConvGeom& g, const Tensor* scale,
                                   const Tensor& shift, Activation a, Tensor& y) = 0;
    // Batchnorm with rolling statistics as a per-channel affine: k = scales / sqrt(var + eps),
    // scale_out = k, shift_out = biases - mean * k (what conv2d_affine_act takes).
    virtual void batchnorm_fold(const Tensor& scales, const Tensor& biases, const Tensor& mean, const Tensor& var,
                                float eps, Tensor& scale_out, Tensor& shift_out) = 0;
    // y[n,c,:,:] += bias[c]
    virtual void add_bias(Tensor& y, const Tensor& bias) = 0;
    // y = (y - mean) / sqrt(var + eps) * scale + bias, per channel
    virtual void batchnorm_inference(Tensor& y, const Tensor& mean, const Tensor& var, const Tensor& scale,
                                     const Tensor& bias, float eps) = 0;
    virtual void activate(Tensor& y, Activation a) = 0;

    virtual void maxpool(const Tensor& x, const PoolGeom& g, Tensor& y) = 0;
    virtual void avgpool_local(const Tensor& x, const PoolGeom& g, Tensor& y) = 0;
    virtual void avgpool_global(const Tensor& x, Tensor& y) = 0;
    // maxpool_depth: y[c] = max over input channels k with k % out_c == c (Darknet's maxpool_depth).
    virtual void maxpool_depth(const Tensor& x, Tensor& y) = 0;

    // y[:, dst_c0 : dst_c0+count] = x[:, src_c0 : src_c0+count] (route and its groups)
    virtual void copy_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) = 0;
    // y = sum of x and every `from` tensor (Darknet's shortcut with differing shapes), optionally weighted.
    virtual void shortcut(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                          ShortcutWeights wt, ShortcutNorm norm, Tensor& y) = 0;
    // nearest-neighbour upsample by `stride`, times scale
    virtual void upsample(const Tensor& x, int stride, float scale, Tensor& y) = 0;
    // Darknet's upsample with negative stride: y = scale * sum over each stride x stride block
    virtual void downsample_sum(const Tensor& x, int stride, float scale, Tensor& y) = 0;
    // Darknet's reorg_cpu(x, w, h, c, stride, forward): w/h/c are the loop dimensions it is called with.
    virtual void reorg(const Tensor& x, int w, int h, int c, int stride, bool forward, Tensor& y) = 0;
    // y = from * s where s is [n,c,1,1] (per channel) or, with scale_wh, [n,1,h,w] (per pixel)
    virtual void scale_channels(const Tensor& s, const Tensor& from, bool scale_wh, Tensor& y) = 0;
    // y = a * b elementwise (sam)
    virtual void mul(const Tensor& a, const Tensor& b, Tensor& y) = 0;
    // softmax over each sample's features split in `groups`, with temperature
    virtual void softmax(const Tensor& x, int groups, float temperature, Tensor& y) = 0;
    // yolo head: logistic on x, y, objectness, classes (not with new_coords), then scale_x_y on x, y
    virtual void yolo_activate(const Tensor& x, const YoloGeom& g, Tensor& y) = 0;

    // ---- training ----------------------------------------------------------------------------
    // Gradients are true derivatives of the loss (dL/d...). Every backward op ACCUMULATES (+=) into
    // its gradient outputs, because a tensor can feed several layers (route, shortcut).

    // dw += dL/dw of y = conv(x, w), given dy = dL/dy
    virtual void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw) = 0;
    // dx += dL/dx of y = conv(x, w)
    virtual void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx) = 0;
    // db[c] += sum of dy[:, c, :, :]
    virtual void bias_backward(const Tensor& dy, Tensor& db) = 0;
    // Training batchnorm on y in place, with batch statistics: mean[c], var[c] (unbiased, as Darknet),
    // x_norm = (y - mean) / sqrt(var + eps), y = x_norm * scale + bias.
    virtual void batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                 const Tensor& bias, float eps) = 0;
    // Darknet's rolling statistics: rolling = keep * rolling + (1 - keep) * batch_value, per element.
    virtual void rolling_update(Tensor& rolling, const Tensor& batch_value, float keep) = 0;
    // Given dy = dL/d(batchnorm output): dscale += sum(dy * x_norm), dbias += sum(dy), and dy becomes
    // dL/d(batchnorm input) (through the batch statistics).
    virtual void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var,
                                    float eps, Tensor& dscale, Tensor& dbias) = 0;
    // dy = dL/d(pre-activation x), from dy = dL/d(act(x)), in place.
    virtual void activate_backward(const Tensor& x, Tensor& dy, Activation a) = 0;
    // Training batchnorm then the activation, and the backward of both: what [convolutional] and
    // [connected] with batch_normalize run (layers/norm_activation.h), for every elementwise activation
    // (activation_is_elementwise). The backward takes the activation's gradient at the layer's output y
    // where it reads off it (activation_gradient_from_output: linear, leaky, relu), else at the
    // pre-activation x_norm * scale + bias, formed again from x_norm: no pre-activation copy is kept.
    // By default the composition of the ops above (the host backends); GpuBackend runs the activation
    // inside batchnorm's passes.
    // batchnorm_train(y, ...), then y = act(y).
    virtual void batchnorm_activate_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                          const Tensor& bias, float eps, Activation a) {
        require_elementwise("batchnorm_activate_train", a);
        batchnorm_train(y, mean, var, x_norm, scale, bias, eps);
        if (a != Activation::linear) activate(y, a);
    }
    // activate_backward(v, dy, a) (v = y, or the pre-activation: above), then batchnorm_backward(dy, ...):
    // dy = dL/d(layer output) in, dL/d(batchnorm input) out; y = the layer's output from
    // batchnorm_activate_train. Host tensors only here (the pre-activation is formed on the host).
    virtual void batchnorm_activate_backward(Tensor& dy, const Tensor& y, const Tensor& x_norm, const Tensor& scale,
                                             const Tensor& bias, const Tensor& var, float eps, Activation a,
                                             Tensor& dscale, Tensor& dbias);
    virtual void maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) = 0;
    virtual void avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) = 0;
    virtual void avgpool_global_backward(const Tensor& dy, Tensor& dx) = 0;
    virtual void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
    // y[:, dst_c0 : dst_c0+count] += x[:, src_c0 : src_c0+count] (route backward)
    virtual void add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count) = 0;
    // Backward of shortcut: dx, each dfrom[k] (may be null) and dweights (when weighted) accumulate.
    virtual void shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                                   ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                                   const std::vector<Tensor*>& dfrom, Tensor* dweights) = 0;
    virtual void upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) = 0;
    virtual void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) = 0;
    // Backward of reorg(x, w, h, c, stride, forward): dx += the inverse permutation of dy.
    virtual void reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx) = 0;
    virtual void scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy,
                                         Tensor& ds, Tensor& dfrom) = 0;
    virtual void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) = 0;
    // dx += dL/dx of y = softmax(x) (true Jacobian; Darknet's classifier passes the cost delta straight through)
    virtual void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) = 0;

    // ---- loss scaling (half-precision training, src-lib/gpu/PRECISION.md) ----
    // y += alpha * x, element by element; x and y of the same size, each in any storage type the
    // backend holds (the [yolo] head's fp32 delta into the half delta of the layer below, alpha =
    // the loss scale). Math in fp32, y rounded once.
    virtual void add_scaled(const Tensor& x, float alpha, Tensor& y) = 0;
    // Dynamic loss scaling's unscale: grad (fp32) *= factor, and found[0] = 1 if any element of the
    // result is not finite (inf or NaN). found is a 1-element fp32 tensor that the caller zeroes; the
    // op never clears it, so one found serves every gradient of a step.
    virtual void unscale_check(Tensor& grad, float factor, Tensor& found) = 0;

    // Darknet's yolo loss of one head (kernels/yolo_loss.h: what each buffer holds, the passes):
    // overwrites delta with dL/d(head input) and stats [batch, YOLO_LOSS_STATS] with per-image
    // partial sums, which yolo/loss.cpp reduces into YoloLossStats.
    virtual void yolo_loss(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                           Tensor& delta, Tensor& stats) = 0;

    // Detection's decode, threshold and compaction of one head (kernels/yolo_decode.h: the record,
    // the buffers): every prediction with objectness > a.thresh gets a record in its image's block of
    // `candidates`; counts[b] (int32) = image b's records, which come in any order (flat index
    // inside). yolo/detect.cpp downloads only the counts and the used records.
    virtual void yolo_candidates(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a,
                                 Tensor& candidates, Tensor& counts) = 0;

    // Dropout's mask: mask[i] = 0 with probability p, else 1 / (1 - p), drawn from a counter-based
    // hash of (seed, i) (kernels/dropout.h) so that every backend draws the same mask for a seed.
    virtual void dropout_mask(Tensor& mask, float probability, uint64_t seed) = 0;

    // Darknet's SGD step: m = m - grad - decay*batch*w; w += lr/batch * m; m *= momentum; grad = 0.
    // (m is Darknet's `*_updates` buffer; pass decay = 0 for biases and batchnorm scales.)
    // skip: null, or a 1-element fp32 flag in this backend's memory (unscale_check's found): where it
    // holds a nonzero value when the op runs, the step is skipped (grad = 0, w and m untouched). The
    // flag is read where the op runs, so a GPU queues the step without waiting for it.
    virtual void sgd_update(Tensor& w, Tensor& grad, Tensor& m, float lr, float momentum, float decay, int batch,
                            const Tensor* skip) = 0;
    // Darknet's Adam step (t = update count from 1): see kernels/optimizer.h; skip as sgd_update's.
    virtual void adam_update(Tensor& w, Tensor& grad, Tensor& m, Tensor& v, float lr, float b1, float b2,
                             float eps, float decay, int batch, int t, const Tensor* skip) = 0;

protected:
    uint64_t params_version_ = 0;
    float gradient_scale_ = 1.0f;
    static void require_elementwise(const char* op, Activation a) {
        if (!activation_is_elementwise(a))
            throw DarknetError(std::string(op) + ": activation " + activation_name(a) +
                               " mixes a pixel's channels (elementwise activations only)");
    }
};

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_cpu_backend();
// make_backend(name), for every device name: devices.h

}  // namespace dn
