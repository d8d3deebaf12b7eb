// GpuBackend's matrix products and convolutions. A convolution is, per image and group, im2col
// into a column matrix and one GEMM (as Darknet's GPU path without cuDNN); 1x1 stride-1 unpadded
// convolutions skip im2col (the image is its own column matrix). The backward passes are the
// transposed GEMMs, and col2im as a gather. The device's vendor GEMM runs where it offers one, the
// tiled gemm_<type> kernel otherwise. Every pass takes every storage type for its activations and
// their gradients (src-lib/gpu/PRECISION.md: im2col, col2im, the axis swap and the GEMM are storage
// kernels); weights and weight gradients stay fp32.
#include <algorithm>

#include "../errors.h"
#include "../kernels/args_forward.h"
#include "../kernels/args_training.h"
#include "../cpu/cpu_isa.h"
#include "gpu_backend.h"

namespace dn {

namespace {

// One (image, group) slice of a convolution: where its matrices start in the tensors.
struct ConvSlice {
    int cin_g, cout_g, K, out_plane;  // K = cin_g * kh * kw
    bool direct;                      // 1x1, stride 1, no padding: the image is the column matrix
    size_t x_offset(const Shape& xs, int n, int gi) const { return ((size_t)n * xs.c + (size_t)gi * cin_g) * xs.plane(); }
    size_t y_offset(const Shape& ys, int n, int gi) const { return ((size_t)n * ys.c + (size_t)gi * cout_g) * ys.plane(); }
    size_t w_offset(int gi) const { return (size_t)gi * cout_g * K; }
};

ConvSlice conv_slice(const Shape& xs, const Shape& ys, const ConvGeom& g) {
    ConvSlice s;
    s.cin_g = xs.c / g.groups;
    s.cout_g = ys.c / g.groups;
    s.K = s.cin_g * g.kh * g.kw;
    s.out_plane = (int)ys.plane();
    s.direct = g.kh == 1 && g.kw == 1 && g.stride_x == 1 && g.stride_y == 1 && g.pad == 0 && xs.h == ys.h &&
               xs.w == ys.w;
    return s;
}

// [A][B][plane] at x_off -> [B][A][plane] at y_off (y += with accumulate).
void swap_axes(GpuBackend& be, const Tensor& x, size_t x_off, int A, int B, int plane, Tensor& y, size_t y_off,
               bool accumulate) {
    SwapAxesArgs a{A * B * plane, A, B, plane, (int32_t)x_off, (int32_t)y_off, accumulate ? 1 : 0};
    const std::string kernel = GpuBackend::storage_kernel("swap_axes", GpuBackend::same_storage("swap_axes", {&x, &y}));
    be.launch(kernel.c_str(), (size_t)a.n, {be.any_buf(y), be.any_buf(x)}, a);
}

// How many images one GEMM covers. One GEMM per image is launch-bound at batch 64 (small matrices,
// 64 times per layer); a run of images makes the column matrix [K, run * P] and the product
// [cout, run * P] wide, each kept under kRunFloats. Grouped convolutions go image by image (their
// output channels interleave per image).
int run_length(const ConvSlice& s, int groups, int images) {
    const size_t kRunFloats = size_t(32) << 20;  // 128 MB per temporary
    if (groups != 1) return 1;
    size_t per_image = (size_t)std::max(s.K, s.cout_g) * s.out_plane;
    return (int)std::max<size_t>(1, std::min<size_t>(images, kRunFloats / std::max<size_t>(per_image, 1)));
}

// op(B) of the forward and weight-gradient GEMMs for images [n0, n0 + run), group gi: [K, run * P].
// A single image of a direct convolution is its own column matrix; a run of them is the images with
// their first two axes swapped; otherwise im2col into the column scratch buffer. *offset = where it
// starts.
const Tensor& column_matrix(GpuBackend& be, const Tensor& x, const Shape& ys, const ConvGeom& g, const ConvSlice& s,
                            int n0, int run, int gi, size_t* offset) {
    const Shape& xs = x.shape();
    size_t xo = s.x_offset(xs, n0, gi);
    if (s.direct && run == 1) return *offset = xo, x;
    Tensor& col = be.scratch(0, (size_t)s.K * run * s.out_plane, x.dtype());
    *offset = 0;
    if (s.direct) {
        swap_axes(be, x, xo, run, s.K, s.out_plane, col, 0, false);
        return col;
    }
    Im2colImageArgs a{(int32_t)((size_t)s.cin_g * run * s.out_plane), (int32_t)xo, 0, s.cin_g, xs.h, xs.w, g.kh, g.kw,
                      g.pad, g.stride_y, g.stride_x, g.dilation, ys.h, ys.w, run, (int32_t)((size_t)xs.c * xs.plane())};
    be.launch(GpuBackend::storage_kernel("im2col", x.dtype()).c_str(), (size_t)a.n, {be.any_buf(col), be.any_buf(x)}, a);
    return col;
}

ConvParams conv_params(const Tensor& x, const Tensor& y, const ConvGeom& g) {
    const bool nhwc = GpuBackend::same_layout("convolution", {&x, &y}) == Layout::nhwc;
    return ConvParams{nchw(x), nchw(y), g.kh, g.kw, g.stride_y, g.stride_x, g.pad, g.dilation, g.groups, x.dtype(), nhwc};
}

// A device's half weight gradient sums x dy over the batch and every position. In fp16, times the loss
// scale, that sum leaves fp16's range where the activations' gradients fit (measured on an H100 with
// test_half_training's net: a head's 1x1 gradient reaches 193 unscaled, inf at the scale 1024 its deltas
// want). So it is formed with the scale divided out (cuDNN applies alpha to its fp32 sums, before the
// half store) and the add into the fp32 dw multiplies it back (GpuBackend::half_dw_scale): the gradient
// is rounded to fp16 at its own magnitude, 11 bits down to 2^-14 (bf16 keeps 8), subnormal below,
// 0 below 2^-24. bf16 has fp32's range: scale 1.
ConvParams half_dw_params(const Tensor& x, const Tensor& dy, const ConvGeom& g, float scale) {
    ConvParams p = conv_params(x, dy, g);
    p.dw_alpha = 1.0f / scale;
    return p;
}

// NHWC 1x1 convolutions (stride 1, unpadded, ungrouped) are one GEMM each way: the activations are
// [N*H*W, C] row-major matrices and the weights [out, in] (KCRS and KRSC alike at 1x1). The device's
// GEMM runs them (cuBLAS on CUDA), where cuDNN's NHWC choices were up to 10x slower than its NCHW ones
// (H100, bf16, yolov4-tiny: a 26x26x256 data gradient 1.117 against 0.109 ms); the weight gradient's
// fp32 sums go straight into the fp32 dw, in fp16 too. The matrices are flat views ([1, 1, 1, n]: NCHW
// and NHWC orders agree, so any_buf and a fallback's host copies take them as they are).
bool pointwise_nhwc(const Tensor& x, const Tensor& y, const ConvGeom& g) {
    return x.layout() == Layout::nhwc && g.kh == 1 && g.kw == 1 && g.stride_x == 1 && g.stride_y == 1 && g.pad == 0 &&
           g.groups == 1 && x.shape().h == y.shape().h && x.shape().w == y.shape().w;
}

Tensor flat(const Tensor& t) { return Tensor(Shape{1, 1, 1, (int)t.size()}, t.buffer()); }

// The fp32 parameter tensor a half backward pass writes: the weight gradient.
void require_f32_param(const char* op, const char* what, const Tensor& t) {
    if (t.dtype() != DType::f32)
        throw DarknetError(std::string(op) + ": " + what + " is a parameter gradient, fp32 in every precision, not " +
                           dtype_name(t.dtype()) + " (src-lib/gpu/PRECISION.md)");
}

}  // namespace

// C = alpha op(A) op(B) + beta C on sub-matrices at element offsets, A and B in one storage type, C
// in that type or in fp32 (fp32 accumulation either way): the device's GEMM or ours.
static void gemm_at(GpuBackend& be, bool ta, bool tb, int M, int N, int K, float alpha, const Tensor& A, size_t a_off,
                    int lda, const Tensor& B, size_t b_off, int ldb, float beta, Tensor& C, size_t c_off, int ldc) {
    if (M == 0 || N == 0) return;
    DType t = GpuBackend::same_storage("gemm", {&A, &B});
    const bool c_f32 = C.dtype() == DType::f32;
    if (!c_f32) GpuBackend::same_storage("gemm", {&A, &C});  // C: A's type or fp32
    bool vendor = t == DType::f32 ? be.dev().gemm(ta, tb, M, N, K, alpha, A.memory(), a_off, lda, B.memory(), b_off, ldb,
                                                  beta, C.memory(), c_off, ldc)
                                  : be.dev().gemm_half(t, C.dtype(), ta, tb, M, N, K, alpha, A.memory(), a_off, lda,
                                                       B.memory(), b_off, ldb, beta, C.memory(), c_off, ldc);
    if (vendor) return;
    const std::string kernel = GpuBackend::storage_kernel("gemm", t);
    if (!be.allows_group_size(kernel.c_str(), 256))  // a device with smaller groups: the CPU's GEMM on (fp32) copies
        return be.fallback("gemm", [&](Backend& cpu, HostStage& h) {
            const Tensor &hA = h.in(A), &hB = h.in(B);
            Tensor& hC = h.inout(C);
            cpu_isa().sgemm(ta, tb, M, N, K, alpha, hA.data() + a_off, lda, hB.data() + b_off, ldb, beta, hC.data() + c_off, ldc);
        });
    int tiles_n = (N + 15) / 16;
    GemmArgs a{M, N, K, lda, ldb, ldc, ta ? 1 : 0, tb ? 1 : 0, (int32_t)a_off, (int32_t)b_off, (int32_t)c_off,
               tiles_n, alpha, beta, c_f32 ? 1 : 0};
    // an fp32 C is bound to both C slots (the kernel writes C32 only, see storage_kernels.h)
    be.launch_tiles(kernel.c_str(), (size_t)((M + 15) / 16) * tiles_n,
                    {be.any_buf(A), be.any_buf(B), be.any_buf(C), be.any_buf(C)}, a);
}

void GpuBackend::gemm(bool ta, bool tb, int M, int N, int K, float alpha, const Tensor& A, int lda, const Tensor& B,
                      int ldb, float beta, Tensor& C, int ldc) {
    gemm_at(*this, ta, tb, M, N, K, alpha, A, 0, lda, B, 0, ldb, beta, C, 0, ldc);
}

void GpuBackend::conv2d(const Tensor& x, const Tensor& w_param, const ConvGeom& g, Tensor& y) {
    // half activations take a half copy of the fp32 weights (NHWC ones a KRSC copy); everything below
    // runs in their type
    const ConvParams p = conv_params(x, y, g);
    const DType t = same_storage("conv2d", {&x, &y});
    if (pointwise_nhwc(x, y, g)) {  // Y[NP, out] = X[NP, in] W^T
        const int rows = x.shape().n * (int)x.shape().plane(), in = x.shape().c, out = y.shape().c;
        Tensor y_flat = flat(y);
        return gemm_at(*this, false, true, rows, out, in, 1.0f, flat(x), 0, in, flat(param_in(w_param, t)), 0, in, 0.0f,
                       y_flat, 0, out);
    }
    const Tensor& w = param_in(w_param, t, x.layout());
    if (dev().conv2d(p, x.memory(), w.memory(), y.memory())) return;  // cuDNN, MPS
    if (p.nhwc) {  // no NHWC convolution on this device: on NCHW copies (a layout it would not choose)
        Tensor y_nchw = nchw_scratch(y, 7, false);
        conv2d(nchw_scratch(x, 6, true), w_param, g, y_nchw);
        return relayout(y_nchw, y);
    }
    const Shape &xs = x.shape(), &ys = y.shape();
    ConvSlice s = conv_slice(xs, ys, g);
    const int P = s.out_plane, most = run_length(s, g.groups, xs.n);
    for (int n0 = 0; n0 < xs.n; n0 += most) {
        int run = std::min(most, xs.n - n0);
        for (int gi = 0; gi < g.groups; ++gi) {
            size_t bo;
            const Tensor& b = column_matrix(*this, x, ys, g, s, n0, run, gi, &bo);
            if (run == 1) {
                gemm_at(*this, false, false, s.cout_g, P, s.K, 1.0f, w, s.w_offset(gi), s.K, b, bo, P, 0.0f, y,
                        s.y_offset(ys, n0, gi), P);
                continue;
            }
            // [cout, run * P], then to the images' [run][cout][P]
            Tensor& product = scratch(1, (size_t)s.cout_g * run * P, y.dtype());
            gemm_at(*this, false, false, s.cout_g, run * P, s.K, 1.0f, w, s.w_offset(gi), s.K, b, bo, run * P, 0.0f,
                    product, 0, run * P);
            swap_axes(*this, product, 0, s.cout_g, run, P, y, s.y_offset(ys, n0, 0), false);
        }
    }
}

void GpuBackend::conv2d_affine_act(const Tensor& x, const Tensor& w, const ConvGeom& g, const Tensor* scale,
                                   const Tensor& shift, Activation a, Tensor& y) {
    conv2d(x, w, g, y);
    const Shape s = channel_view(y).shape();
    bool elementwise = activation_is_elementwise(a);
    AffineActArgs args{(int32_t)y.size(), s.c, (int32_t)s.plane(), scale ? 1 : 0, elementwise ? (int32_t)a : 0};
    std::vector<KernelArg> bufs{flat_buf(y), buf(scale ? *scale : shift), buf(shift)};
    if (y.layout() == Layout::nhwc)  // a thread per channel and a few rows: no division per element
        launch(storage_kernel("affine_act_nhwc", y.dtype()).c_str(), nhwc_pass_threads(y.size(), s.c), bufs, args);
    else
        launch(storage_kernel("affine_act", y.dtype()).c_str(), y.size(), bufs, args);
    if (!elementwise) activate(y, a);
}

void GpuBackend::conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw) {
    // x, dy in storage S; dw fp32 in every precision (src-lib/gpu/PRECISION.md)
    const DType t = same_storage("conv2d_backward_weights", {&x, &dy});
    require_f32_param("conv2d_backward_weights", "dw", dw);
    if (pointwise_nhwc(x, dy, g)) {  // dW[out, in] += dY^T[out, NP] X[NP, in], fp32 sums into the fp32 dw
        const int rows = x.shape().n * (int)x.shape().plane(), in = x.shape().c, out = dy.shape().c;
        Tensor dw_flat = flat(dw);
        return gemm_at(*this, true, false, out, in, rows, 1.0f, flat(dy), 0, out, flat(x), 0, in, 1.0f, dw_flat, 0, in);
    }
    if (conv_params(x, dy, g).nhwc) return conv2d_backward_weights_nhwc(x, dy, g, dw);
    if (t == DType::f32) {
        if (dev().conv2d_backward_weights(conv_params(x, dy, g), x.memory(), dy.memory(), dw.memory())) return;
    } else {
        // cuDNN forms a half dw (its filter descriptor takes x's type): into a half scratch, then
        // added to the fp32 dw, one rounding of this step's gradient. (Darknet's CUDNN_HALF converts
        // the whole accumulator to half and back, rounding the running sum too.) In fp16 without the
        // loss scale (half_dw_params), which the add puts back in fp32.
        Tensor& part = scratch(3, dw.size(), t);
        const float scale = half_dw_scale(t);
        if (dev().conv2d_backward_weights(half_dw_params(x, dy, g, scale), x.memory(), dy.memory(), part.memory())) {
            launch(storage_kernel("add_into_f32", t).c_str(), dw.size(), {buf(dw), any_buf(part)},
                   ScaledArgs{(int32_t)dw.size(), scale});
            return;
        }
    }
    // dW_g[cout_g, K] += dY_g[cout_g, run * P] * col^T[run * P, K], summed over the runs of images:
    // half operands, the GEMM's fp32 sums added straight into the fp32 dw (no half result at all;
    // cuBLAS GemmEx with an fp32 C on CUDA)
    const Shape &xs = x.shape(), &ys = dy.shape();
    ConvSlice s = conv_slice(xs, ys, g);
    const int P = s.out_plane, most = run_length(s, g.groups, xs.n);
    for (int n0 = 0; n0 < xs.n; n0 += most) {
        int run = std::min(most, xs.n - n0);
        for (int gi = 0; gi < g.groups; ++gi) {
            size_t bo;
            const Tensor& b = column_matrix(*this, x, ys, g, s, n0, run, gi, &bo);
            if (run == 1) {
                gemm_at(*this, false, true, s.cout_g, s.K, P, 1.0f, dy, s.y_offset(ys, n0, gi), P, b, bo, P, 1.0f, dw,
                        s.w_offset(gi), s.K);
                continue;
            }
            Tensor& dy_run = scratch(1, (size_t)s.cout_g * run * P, t);  // [run][cout][P] -> [cout][run][P]
            swap_axes(*this, dy, s.y_offset(ys, n0, 0), run, s.cout_g, P, dy_run, 0, false);
            gemm_at(*this, false, true, s.cout_g, s.K, run * P, 1.0f, dy_run, 0, run * P, b, bo, run * P, 1.0f, dw,
                    s.w_offset(gi), s.K);
        }
    }
}

// NHWC: the device's pass writes the gradient in its filter layout, KRSC, into a scratch of dy's type
// (overwritten in half, added to zeros in fp32: device.h), which is added into the fp32 KCRS dw in the
// same pass that reorders it (fp16: times the loss scale, see half_dw_params). Where the device has no
// NHWC convolution: on NCHW copies.
void GpuBackend::conv2d_backward_weights_nhwc(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw) {
    const DType t = x.dtype();
    Tensor krsc(dw.shape(), scratch(3, dw.size(), t, Layout::nhwc).buffer());
    if (t == DType::f32) fill(krsc, 0.0f);
    const float scale = half_dw_scale(t);
    if (dev().conv2d_backward_weights(half_dw_params(x, dy, g, scale), x.memory(), dy.memory(), krsc.memory())) {
        const RelayoutArgs r = relayout_args(krsc, Layout::nchw);
        launch(storage_kernel("add_relayout_into_f32", t).c_str(), dw.size(), {buf(dw), flat_buf(krsc)},
               RelayoutAddArgs{r.n, r.channels, r.plane, r.to_nhwc, scale});
        return;
    }
    conv2d_backward_weights(nchw_scratch(x, 6, true), nchw_scratch(dy, 7, true), g, dw);
}

void GpuBackend::conv2d_backward_data(const Tensor& dy, const Tensor& w_param, const ConvGeom& g, Tensor& dx) {
    // dy, dx in storage S; half gradients take the half copy of the fp32 weights that conv2d takes
    const DType t = same_storage("conv2d_backward_data", {&dy, &dx});
    const ConvParams p = conv_params(dx, dy, g);
    if (pointwise_nhwc(dx, dy, g)) {  // dX[NP, in] += dY[NP, out] W[out, in]
        const int rows = dx.shape().n * (int)dx.shape().plane(), in = dx.shape().c, out = dy.shape().c;
        Tensor dx_flat = flat(dx);
        return gemm_at(*this, false, false, rows, in, out, 1.0f, flat(dy), 0, out, flat(param_in(w_param, t)), 0, in,
                       1.0f, dx_flat, 0, in);
    }
    const Tensor& w = param_in(w_param, t, dx.layout());
    if (dev().conv2d_backward_data(p, dy.memory(), w.memory(), dx.memory())) return;
    if (p.nhwc) {  // as conv2d: on NCHW copies, dx's added into
        Tensor dx_nchw = nchw_scratch(dx, 7, true);
        conv2d_backward_data(nchw_scratch(dy, 6, true), w_param, g, dx_nchw);
        return relayout(dx_nchw, dx);
    }
    // col[K, run * P] = W_g^T[K, cout_g] * dY_g[cout_g, run * P]; dx += col2im(col). The column
    // matrix is fp32 in every storage type, so a half dx is rounded once (in col2im), not also in col.
    const Shape &xs = dx.shape(), &ys = dy.shape();
    ConvSlice s = conv_slice(xs, ys, g);
    const int P = s.out_plane, most = run_length(s, g.groups, xs.n);
    const int image_stride = (int)((size_t)xs.c * xs.plane());
    for (int n0 = 0; n0 < xs.n; n0 += most) {
        int run = std::min(most, xs.n - n0);
        for (int gi = 0; gi < g.groups; ++gi) {
            size_t xo = s.x_offset(xs, n0, gi);
            const Tensor* dy_g = &dy;
            size_t dy_off = s.y_offset(ys, n0, gi);
            if (run > 1) {  // [run][cout][P] -> [cout][run][P]
                Tensor& dy_run = scratch(1, (size_t)s.cout_g * run * P, t);
                swap_axes(*this, dy, s.y_offset(ys, n0, 0), run, s.cout_g, P, dy_run, 0, false);
                dy_g = &dy_run;
                dy_off = 0;
            }
            if (s.direct && run == 1) {  // dx += W^T dY in place: one rounding in half too
                gemm_at(*this, true, false, s.K, P, s.cout_g, 1.0f, w, s.w_offset(gi), s.K, *dy_g, dy_off, P, 1.0f, dx,
                        xo, P);
                continue;
            }
            Tensor& col = scratch(2, (size_t)s.K * run * P);
            gemm_at(*this, true, false, s.K, run * P, s.cout_g, 1.0f, w, s.w_offset(gi), s.K, *dy_g, dy_off, run * P,
                    0.0f, col, 0, run * P);
            if (s.direct && t == DType::f32) {  // [C][run][P] -> dx's [run][C][P], added (col2im does it in half)
                swap_axes(*this, col, 0, s.K, run, P, dx, xo, true);
                continue;
            }
            Col2imArgs a{(int32_t)((size_t)run * s.cin_g * xs.plane()), (int32_t)xo, 0, s.cin_g, xs.h, xs.w, g.kh, g.kw,
                         g.pad, g.stride_y, g.stride_x, g.dilation, ys.h, ys.w, run, image_stride};
            launch(storage_kernel("col2im", t).c_str(), (size_t)a.n, {buf(col), any_buf(dx)}, a);
        }
    }
}

float GpuBackend::half_dw_scale(DType t) const { return t == DType::f16 ? gradient_scale_ : 1.0f; }

}  // namespace dn
