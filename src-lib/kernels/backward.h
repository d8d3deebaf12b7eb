// Backward kernels of the activation, pooling, data-movement and combining ops (device kernels only)
// that run in fp32 only, and the helpers of the storage-typed ones (storage_training.h: activate,
// normalize_channels, maxpool, avgpool_local, upsample and shortcut backward, in fp32, fp16 and bf16).
// Where several dy elements feed one dx element the kernels GATHER: one thread per dx element finds
// its contributions, adds them in the reference's loop order and adds the sum to dx (accumulating, as
// every backward op). No atomics, so results are deterministic. Sums over many elements (scale_channels'
// ds, softmax, shortcut weights) run one group per result (power-of-two group size <= 256) with
// GROUP_SUM (group_sum.h).
#pragma once
#include "activation_math.h"
#include "args_forward.h"
#include "layout_index.h"
#include "args_training.h"
#include "group_sum.h"

// normalize_channels' f (relu or exp), for normalize_channels_backward_<type>.
KFN float normalize_channels_f(float v, int softmax) { return softmax ? exp(v) : (v > 0.0f ? v : 0.0f); }

// ---- pooling --------------------------------------------------------------------------------
// The window of output (oy, ox) covers input rows oy * stride_y - padding/2 + [0, size). The output
// rows whose window holds input row iy: oy in [ceil((t - size + 1) / stride), t / stride], t = iy + padding/2.
KFN int pool_first(int t, int size, int stride) { return t - size + 1 <= 0 ? 0 : (t - size + stride) / stride; }
KFN int pool_last(int t, int stride, int out) { return t / stride < out - 1 ? t / stride : out - 1; }
// Where pixel 0 of output window i's input plane lies (layout_index.h): its pixel p is at that +
// p * layout_step(a.channels, a.nhwc).
KFN int pool_plane(uint i, KARGS_PARAM(PoolArgs) a) {
    return layout_base((int)i, a.channels, a.out_w * a.out_h, a.in_h * a.in_w, a.nhwc);
}
// maxpool backward runs in two passes, each a gather (maxpool_argmax_<type>, maxpool_backward_<type>).
// Re-running every covering window's argmax per dx element costs size^4 reads per element
// (yolov7-tiny's SPP pools of size 13: 28561, half of its training step); remembering each window's
// winner costs size^2 per pass.

// dx[n, c, :, :] += dy[n, c] / plane. n = elements of dx.
KERNEL(avgpool_global_backward_f32)(KCBUF(float, dy, 0), KBUF(float, dx, 1),
                                    KARGS(AvgpoolGlobalBackwardArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    dx[i] += dy[i / (uint)a.plane] / (float)a.plane;
}

// maxpool_depth backward: input channel k competes in output channel k % out_c; one thread per dx
// element re-runs that argmax over k' = c, c + out_c, ... (first strictly greatest wins).
KERNEL(maxpool_depth_backward_f32)(KCBUF(float, x, 0), KCBUF(float, dy, 1), KBUF(float, dx, 2),
                                   KARGS(MaxpoolDepthArgs, a, 3) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int p = (int)(i % (uint)a.plane), k = (int)((i / (uint)a.plane) % (uint)a.in_c);
    int b = (int)(i / (uint)(a.plane * a.in_c)), c = k % a.out_c;
    float best = -FLT_MAX_K;
    int bk = -1;
    for (int j = c; j < a.in_c; j += a.out_c) {
        float v = x[(b * a.in_c + j) * a.plane + p];
        if (v > best) best = v, bk = j;
    }
    if (bk == k) dx[i] += dy[(b * a.out_c + c) * a.plane + p];
}

// downsample_sum backward: each dx element inside a whole block gets scale * its block's dy; the rows
// and columns beyond out * stride (odd sizes) fed no output and get nothing. n = elements of dx.
KERNEL(downsample_sum_backward_f32)(KCBUF(float, dy, 0), KBUF(float, dx, 1),
                                    KARGS(ResampleArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int ix = (int)(i % (uint)a.in_w), iy = (int)((i / (uint)a.in_w) % (uint)a.in_h);
    int nc = (int)(i / (uint)(a.in_w * a.in_h));
    int oy = iy / a.stride, ox = ix / a.stride;
    if (oy < a.out_h && ox < a.out_w) dx[i] += a.scale * dy[(nc * a.out_h + oy) * a.out_w + ox];
}

// reorg backward: reorg is a permutation (Darknet's reorg_cpu index map in -> out over the w x h x c
// loop), so each dx element receives exactly one dy element. forward = 1: the forward wrote
// y[out(in)] = x[in], so dx[in] += dy[out(in)]; forward = 0: y[in] = x[out(in)], so dx at out gets dy
// at in, found through the inverse map. n = elements of dx.
KERNEL(reorg_backward_f32)(KCBUF(float, dy, 0), KBUF(float, dx, 1), KARGS(ReorgArgs, a, 2) KTHREAD_IDS) {
    uint t = KGID;
    if (t >= (uint)a.n) return;
    int out_c = a.c / (a.stride * a.stride);
    int w2n = a.w * a.stride, h2n = a.h * a.stride;  // the "out" side's plane
    if (a.forward) {  // t is an `in` index: i + w * (j + h * (k + c * b))
        int i = (int)(t % (uint)a.w), j = (int)((t / (uint)a.w) % (uint)a.h);
        int k = (int)((t / (uint)(a.w * a.h)) % (uint)a.c), b = (int)(t / (uint)(a.w * a.h * a.c));
        int c2 = k % out_c, offset = k / out_c;
        int w2 = i * a.stride + offset % a.stride, h2 = j * a.stride + offset / a.stride;
        dx[t] += dy[w2 + w2n * (h2 + h2n * (c2 + out_c * b))];
    } else {  // t is an `out` index: w2 + w2n * (h2 + h2n * (c2 + out_c * b))
        int w2 = (int)(t % (uint)w2n), h2 = (int)((t / (uint)w2n) % (uint)h2n);
        int c2 = (int)((t / (uint)(w2n * h2n)) % (uint)out_c), b = (int)(t / (uint)(w2n * h2n * out_c));
        int k = ((h2 % a.stride) * a.stride + w2 % a.stride) * out_c + c2;
        dx[t] += dy[w2 / a.stride + a.w * (h2 / a.stride + a.h * (k + a.c * b))];
    }
}

// ---- combining ops ----------------------------------------------------------------------------
// y = from * s with s per (n, c) (or per (n, pixel) with scale_wh): one group per element g of s.
// dfrom += dy * s[g] over the elements g scales, and ds[g] += sum(dy * from) over them (a group
// reduction). Grid: batch * channels groups (batch * plane with scale_wh).
KERNEL(scale_channels_backward_f32)(KCBUF(float, s, 0), KCBUF(float, from, 1), KCBUF(float, dy, 2), KBUF(float, ds, 3),
                                    KBUF(float, dfrom, 4), KARGS(ScaleChannelsBackwardArgs, a, 5) KTHREAD_IDS) {
    KSHARED float partial[256];
    int g = (int)KGROUP;
    // per channel: g = n * channels + c owns one contiguous plane; per pixel: g = n * plane + p owns
    // pixel p of every channel of sample n
    int base = a.scale_wh ? (g / a.plane) * a.channels * a.plane + g % a.plane : g * a.plane;
    int step = a.scale_wh ? a.plane : 1, count = a.scale_wh ? a.channels : a.plane;
    float k = s[g], sum = 0.0f;
    for (int e = (int)KLID; e < count; e += (int)KGROUP_SIZE) {
        int i = base + e * step;
        dfrom[i] += dy[i] * k;
        sum += dy[i] * from[i];
    }
    GROUP_SUM(partial, sum)
    if (KLID == 0) ds[g] += sum;
}

// y = a * b elementwise: da += dy * b, db += dy * a. n = elements.
KERNEL(mul_backward_f32)(KCBUF(float, x_a, 0), KCBUF(float, x_b, 1), KCBUF(float, dy, 2), KBUF(float, da, 3),
                         KBUF(float, db, 4), KARGS(MulBackwardArgs, a, 5) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    float d = dy[i];
    da[i] += d * x_b[i];
    db[i] += d * x_a[i];
}

// Softmax with temperature T, true Jacobian: dx += y * (dy - sum(dy * y)) / T over each softmax
// group. One group of threads per softmax group: grid = batch * groups groups.
KERNEL(softmax_backward_f32)(KCBUF(float, y, 0), KCBUF(float, dy, 1), KBUF(float, dx, 2),
                             KARGS(SoftmaxBackwardArgs, a, 3) KTHREAD_IDS) {
    KSHARED float partial[256];
    int g = (int)KGROUP;
    // groups need not tile the sample exactly (sample / groups rounds down), hence no g * group_size
    int base = (g / a.groups) * a.sample + (g % a.groups) * a.group_size;
    float dot = 0.0f;
    for (int e = (int)KLID; e < a.group_size; e += (int)KGROUP_SIZE) dot += dy[base + e] * y[base + e];
    GROUP_SUM(partial, dot)
    for (int e = (int)KLID; e < a.group_size; e += (int)KGROUP_SIZE)
        dx[base + e] += y[base + e] * (dy[base + e] - dot) / a.temperature;
}

// ---- shortcut ---------------------------------------------------------------------------------
// y_i = sum_k w_k * in_k[i] (in_0 = x, in_k = from[k-1] where it has element i), with the weights of
// weight group widx normalised as Darknet's shortcut_multilayer: raw_k = weights[widx + k * step];
// none: w_k = raw_k; relu: max(raw_k, 0) / S; softmax: exp(raw_k - max) / S; S = 0.0001 + the sum of
// the relu'd or exp'd raw weights. Per feature: widx = 0, step = 1; per channel: widx = channel of
// element i, step = channels.

// The largest raw weight and the first input holding it (softmax subtracts it; its derivative moves
// with it), scanned as the reference: strictly greater than the best so far, from -FLT_MAX.
KFN float shortcut_grad_raw_max(KGLOBAL const float* weights, int widx, int step, int inputs) {
    float mx = -FLT_MAX_K;
    for (int k = 0; k < inputs; ++k) mx = weights[widx + k * step] > mx ? weights[widx + k * step] : mx;
    return mx;
}
KFN int shortcut_grad_argmax(KGLOBAL const float* weights, int widx, int step, int inputs) {
    float mx = -FLT_MAX_K;
    int kmax = 0;
    for (int k = 0; k < inputs; ++k)
        if (weights[widx + k * step] > mx) mx = weights[widx + k * step], kmax = k;
    return kmax;
}
KFN float shortcut_grad_term(float raw, float mx, int norm) {
    return norm == 1 ? (raw > 0.0f ? raw : 0.0f) : exp(raw - mx);
}
KFN float shortcut_grad_denominator(KGLOBAL const float* weights, int widx, int step, int inputs, int norm, float mx) {
    float S = 0.0001f;
    for (int k = 0; k < inputs; ++k) S += shortcut_grad_term(weights[widx + k * step], mx, norm);
    return S;
}
// Normalised weight of input k.
KFN float shortcut_grad_weight(KGLOBAL const float* weights, int widx, int step, int inputs, int norm, int k) {
    float raw = weights[widx + k * step];
    if (norm == 0) return raw;
    float mx = shortcut_grad_raw_max(weights, widx, step, inputs);
    return shortcut_grad_term(raw, mx, norm) / shortcut_grad_denominator(weights, widx, step, inputs, norm, mx);
}

// The weight gradient (shortcut_weights_backward_<type>, storage_training.h), the part that flows
// through input k = a.input (launch once per input, in order). dL/dw_k = P = sum over the weight group's elements of dy * in_k (a group reduction); then through
// the normalisation to every raw weight j of the group: dweights[widx + j * step] += dw_k/draw_j * P:
//   none: [j == k];  relu: [raw_j > 0] ([j == k] - w_k) / S;
//   softmax: w_k ([j == k] - w_j) - [j == kmax] w_k 0.0001 / S (raw_kmax is also the max subtracted,
//   which rescales the 0.0001 in S: dw_k/dmax = -w_k 0.0001 / S).
// Grid: one group per weight group: 1 (per_feature) or channels (per_channel); group g owns raw
// weights g + j * step. Not launched for weights_mode = 0.
