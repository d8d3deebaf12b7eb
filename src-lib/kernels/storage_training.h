// Training kernel text written once for every storage type (src-lib/gpu/PRECISION.md, phase 2):
// the backward passes and training batchnorm on activations and their gradients in storage S (the
// macros S_T, S_LD, S_ST, S_NAME of storage_kernels.h), everything else fp32: parameters, parameter
// gradients, batch statistics, the split partial sums. Math and every sum are fp32; an output in S
// is rounded once, when it is stored (a gradient that accumulates, dx +=, is loaded, added in fp32
// and stored). The fp32 instantiation (kernel names *_f32) is the kernel text training ran before
// half existed, operation for operation: its results are unchanged.
// Launch geometry is that of the fp32 kernels this text replaces: kernels/reduce.h for the
// reductions (split_start, the combine kernels that stay fp32), kernels/backward.h for the helpers
// (pool_first, pool_last, shortcut_grad_*, normalize_channels_f) and the gather scheme.
#pragma once
#include "activation_math.h"
#include "args_forward.h"
#include "args_training.h"
#include "group_sum.h"
#include "layout_index.h"

KERNEL(S_NAME(fill))(KBUF(S_T, y, 0), KARGS(FillArgs, a, 1) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, a.value);
}

// y[n,c,:,:] += bias[c] (bias fp32)
KERNEL(S_NAME(add_bias))(KBUF(S_T, y, 0), KCBUF(float, bias, 1), KARGS(ChannelArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, S_LD(y, i) + bias[(i / a.plane) % a.channels]);
}

// y += alpha * x with x fp32 (the [yolo] head's delta into the half delta of the layer below, alpha =
// the loss scale); a half x is widened into fp32 by the host first. n = elements.
KERNEL(S_NAME(add_scaled))(KBUF(S_T, y, 0), KCBUF(float, x, 1), KARGS(ScaledArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, S_LD(y, i) + a.alpha * x[i]);
}

// ---- reductions (kernels/reduce.h) ----------------------------------------------------------------
// db[c] += sum of dy[:, c, :, :]. Grid: `channels` groups.
KERNEL(S_NAME(bias_backward))(KCBUF(S_T, dy, 0), KBUF(float, db, 1), KARGS(BiasBackwardArgs, a, 2) KTHREAD_IDS) {
    KSHARED float partial[256];
    int c = (int)KGROUP, count = a.batch * a.plane;
    float sum = 0.0f;
    for (int e = (int)KLID; e < count; e += (int)KGROUP_SIZE)
        sum += S_LD(dy, ((e / a.plane) * a.channels + c) * a.plane + e % a.plane);
    GROUP_SUM(partial, sum)
    if (KLID == 0) db[c] += sum;
}

// Step 1 of the batch statistics: per split, its mean and sum of squared deviations from that mean
// (two passes over the split, the second from cache: no sum-of-squares cancellation).
// partial[2g] = mean, partial[2g + 1] = M2. Step 2: batchnorm_combine_stats_f32 (reduce.h).
KERNEL(S_NAME(batchnorm_partial_stats))(KCBUF(S_T, y, 0), KBUF(float, partial, 1), KARGS(ChannelSplitArgs, a, 2)
                                            KTHREAD_IDS) {
    KSHARED float shared[256];
    int g = (int)KGROUP, c = g / a.splits;
    int n0 = split_start(a, g % a.splits), n1 = split_start(a, g % a.splits + 1);
    float sum = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) sum += S_LD(y, (n * a.channels + c) * a.plane + p);
    GROUP_SUM(shared, sum)
    float m = sum / (float)((n1 - n0) * a.plane);
    float sq = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) {
            float d = S_LD(y, (n * a.channels + c) * a.plane + p) - m;
            sq += d * d;
        }
    GROUP_SUM(shared, sq)
    if (KLID == 0) {
        partial[2 * g] = m;
        partial[2 * g + 1] = sq;
    }
}

// The elementwise batchnorm passes run a.chunks groups over each (sample, channel) plane (row = one
// plane, GpuBackend::launch_planes): a thread reads its channel's constants once and strides through
// the plane, where one thread per element took two integer divisions and the square root for each.
#define PLANE_CHANNEL(a, c)                                                     \
    uint row_ = KGROUP / (uint)(a).chunks, chunk_ = KGROUP % (uint)(a).chunks; \
    int c = (int)(row_ % (uint)(a).channels);
#define FOR_PLANE_ELEMENTS(a, i)                                                           \
    for (uint p_ = chunk_ * KGROUP_SIZE + KLID, step_ = (uint)(a).chunks * KGROUP_SIZE,    \
              i = row_ * (uint)(a).plane + p_;                                             \
         p_ < (uint)(a).plane; p_ += step_, i += step_)

KFN void S_NAME(normalize_at)(KGLOBAL S_T* y, KGLOBAL S_T* x_norm, int i, float m, float sd, float k, float b,
                              int act) {
    float xn = (S_LD(y, i) - m) / sd;
    S_ST(x_norm, i, xn);
    S_ST(y, i, act_forward(xn * k + b, act, S_FAST_MATH));
}

// Elementwise, after batchnorm_combine_stats_f32: x_norm = (y - mean) / sqrt(var + eps),
// y = act(x_norm * scale + bias) (x_norm is rounded to S once; y is formed from the unrounded value
// and rounded once). With a.act = ACT_LINEAR this is plain batchnorm; with another activation it is
// Backend::batchnorm_activate_train, whose separate activation pass (a read and a write of y) this
// saves. In fp32 the expression per element is that of batchnorm then activate: the same result.
KERNEL(S_NAME(batchnorm_normalize))(KBUF(S_T, y, 0), KBUF(S_T, x_norm, 1), KCBUF(float, mean, 2),
                                    KCBUF(float, var, 3), KCBUF(float, scale, 4), KCBUF(float, bias, 5),
                                    KARGS(BatchnormTrainArgs, a, 6) KTHREAD_IDS) {
    PLANE_CHANNEL(a, c)
    float m = mean[c], sd = sqrt(var[c] + a.eps), k = scale[c], b = bias[c];
    FOR_PLANE_ELEMENTS(a, i) S_NAME(normalize_at)(y, x_norm, (int)i, m, sd, k, b, a.act);
}

// First half of batchnorm_backward, step 1 (as the statistics): per split, partial[2g] = sum(dy) and
// partial[2g + 1] = sum(dy * x_norm). Step 2: batchnorm_backward_combine_f32 (reduce.h).
KERNEL(S_NAME(batchnorm_backward_partial))(KCBUF(S_T, dy, 0), KCBUF(S_T, x_norm, 1), KBUF(float, partial, 2),
                                           KARGS(ChannelSplitArgs, a, 3) KTHREAD_IDS) {
    KSHARED float shared[256];
    int g = (int)KGROUP, c = g / a.splits;
    int n0 = split_start(a, g % a.splits), n1 = split_start(a, g % a.splits + 1);
    float sdy = 0.0f, sdyx = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) {
            int i = (n * a.channels + c) * a.plane + p;
            float d = S_LD(dy, i);
            sdy += d;
            sdyx += d * S_LD(x_norm, i);
        }
    GROUP_SUM(shared, sdy)
    GROUP_SUM(shared, sdyx)
    if (KLID == 0) {
        partial[2 * g] = sdy;
        partial[2 * g + 1] = sdyx;
    }
}

// The same, for Backend::batchnorm_activate_backward: the activation's gradient is applied where dy
// is read, g = dy * act'(v), g is stored over dy (rounded to S once) and the sums are taken over the
// stored g, as activate_backward then batchnorm_backward_partial compute them, without
// activate_backward's pass. v: the layer's output y where the activation's gradient reads off it
// (linear, leaky, relu: the composition's results in every storage type), else the pre-activation
// x_norm * scale + bias formed again from x_norm (mish, swish, logistic, ...: no pre-activation copy
// is kept; in fp32 the composition's value bit for bit, in half from the rounded x_norm). y is read
// only for the former. Each element is read and written by one thread only. Then
// batchnorm_backward_combine_f32 and batchnorm_backward_data as for plain batchnorm.
KERNEL(S_NAME(batchnorm_activate_backward_partial))(KBUF(S_T, dy, 0), KCBUF(S_T, y, 1), KCBUF(S_T, x_norm, 2),
                                                    KCBUF(float, scale, 3), KCBUF(float, bias, 4),
                                                    KBUF(float, partial, 5), KARGS(ChannelSplitArgs, a, 6)
                                                        KTHREAD_IDS) {
    KSHARED float shared[256];
    int g = (int)KGROUP, c = g / a.splits;
    int n0 = split_start(a, g % a.splits), n1 = split_start(a, g % a.splits + 1);
    int from_output = act_gradient_from_output(a.act);
    float k = scale[c], b = bias[c], sdy = 0.0f, sdyx = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) {
            int i = (n * a.channels + c) * a.plane + p;
            float xn = S_LD(x_norm, i), v = from_output ? S_LD(y, i) : xn * k + b;
            float d = S_ROUND(S_LD(dy, i) * act_gradient(v, a.act, S_FAST_MATH));
            S_ST(dy, i, d);  // the sums take d as stored: what batchnorm_backward_data reads
            sdy += d;
            sdyx += d * xn;
        }
    GROUP_SUM(shared, sdy)
    GROUP_SUM(shared, sdyx)
    if (KLID == 0) {
        partial[2 * g] = sdy;
        partial[2 * g + 1] = sdyx;
    }
}

// Second half, elementwise: dy becomes dL/d(batchnorm input). With x_norm = (x - mean) * inv and the
// unbiased variance (N - 1), g = dy * scale: dx = inv * (g - mean(g) - x_norm * sum(g * x_norm) / (N - 1)).
KERNEL(S_NAME(batchnorm_backward_data))(KBUF(S_T, dy, 0), KCBUF(S_T, x_norm, 1), KCBUF(float, scale, 2),
                                        KCBUF(float, var, 3), KCBUF(float, sums, 4),
                                        KARGS(BatchnormTrainArgs, a, 5) KTHREAD_IDS) {
    PLANE_CHANNEL(a, c)
    float count = (float)a.batch * (float)a.plane;
    float k = scale[c], inv = 1.0f / sqrt(var[c] + a.eps);
    float gmean = k * sums[2 * c] / count;
    float gx = k * sums[2 * c + 1] / (count > 1.0f ? count - 1.0f : 1.0f);
    FOR_PLANE_ELEMENTS(a, i) S_ST(dy, i, inv * (k * S_LD(dy, i) - gmean - S_LD(x_norm, i) * gx));
}

// ---- training batchnorm on channels-last (NHWC) tensors ------------------------------------------
// A channel's values lie `channels` apart. The reductions take a block of a.lanes channels per group
// (lane = KLID % lanes: consecutive threads read consecutive channels of a pixel) and the group's
// rows of threads take every (group size / lanes)-th pixel of the split; the rows are then summed
// per lane. The splits are of pixels (a.batch = N*H*W, a.plane = 1), so that
// batchnorm_combine_stats_f32 and batchnorm_backward_combine_f32 combine them as they combine the
// NCHW kernels' image splits: the partial sums of (channel c, split s) land where those put them.
// Grid: ceil(channels / lanes) * splits groups, g = block * splits + s. Sums add in a fixed order.

// v becomes, in every thread, the sum of v over the threads of its lane (a fixed tree; every thread
// must reach it). lanes is a power of two <= the group size.
#define LANE_SUM(partial, v, lanes)                                              \
    partial[KLID] = v;                                                           \
    KBARRIER();                                                                  \
    for (uint half_ = KGROUP_SIZE / 2; half_ >= (uint)(lanes); half_ >>= 1) {    \
        if (KLID < half_) partial[KLID] += partial[KLID + half_];                \
        KBARRIER();                                                              \
    }                                                                            \
    v = partial[KLID % (uint)(lanes)];                                           \
    KBARRIER();
// This thread's channel c (-1 past the last channel: it adds nothing but reaches every barrier), its
// split [p0_, p1_) of pixels, and the loop over its share of them, element i.
#define LANE_SPLIT(a, c)                                                                                   \
    int s_ = (int)KGROUP % (a).splits, rows_ = (int)KGROUP_SIZE / (a).lanes, row_ = (int)KLID / (a).lanes; \
    int c = ((int)KGROUP / (a).splits) * (a).lanes + (int)KLID % (a).lanes;                             \
    if (c >= (a).channels) c = -1;                                                                       \
    int p0_ = split_start(a, s_), p1_ = split_start(a, s_ + 1);
// A thread's pixels LANE_UNROLL at a time: the batch's loads are issued together (one 2-byte load in
// flight per thread leaves much of a large GPU's bandwidth unused). Pixel k of the batch at element i
// is element LANE_AT(a, i, k); it exists when LANE_HAS(k). 8 rather than 4: a yolov4 training step on an
// H200 took 55.0 ms of kernels instead of 55.8 (benchmarks/RESULTS_GPU.md).
#define LANE_UNROLL 8
#define FOR_LANE_PIXEL_BATCHES(a, c, i)                                                  \
    if (c >= 0)                                                                          \
        for (int p_ = p0_ + row_, i = p_ * (a).channels + c; p_ < p1_;                   \
             p_ += LANE_UNROLL * rows_, i += LANE_UNROLL * rows_ * (a).channels)
#define LANE_AT(a, i, k) ((i) + (k) * rows_ * (a).channels)
#define LANE_HAS(k) (p_ + (k) * rows_ < p1_)
#define LANE_STORE(a, c, partial, first, second) \
    if (row_ == 0 && c >= 0) {                   \
        partial[2 * (c * (a).splits + s_)] = first;      \
        partial[2 * (c * (a).splits + s_) + 1] = second; \
    }

// One pass: the sums of d = y - shift and of d * d, shift = the split's first value of the channel,
// which keeps the sum of squares from cancelling (the "shifted data" algorithm); then the split's
// mean = shift + S1 / n and M2 = S2 - S1^2 / n, as batchnorm_combine_stats expects.
KERNEL(S_NAME(batchnorm_partial_stats_nhwc))(KCBUF(S_T, y, 0), KBUF(float, partial, 1),
                                             KARGS(ChannelSplitArgs, a, 2) KTHREAD_IDS) {
    KSHARED float shared[256];
    LANE_SPLIT(a, c)
    float shift = c >= 0 ? S_LD(y, p0_ * a.channels + c) : 0.0f, s1 = 0.0f, s2 = 0.0f;
    FOR_LANE_PIXEL_BATCHES(a, c, i) {
        float d[LANE_UNROLL];
        for (int k = 0; k < LANE_UNROLL; ++k) d[k] = LANE_HAS(k) ? S_LD(y, LANE_AT(a, i, k)) - shift : 0.0f;
        for (int k = 0; k < LANE_UNROLL; ++k) {
            s1 += d[k];
            s2 += d[k] * d[k];
        }
    }
    LANE_SUM(shared, s1, a.lanes)
    LANE_SUM(shared, s2, a.lanes)
    float n = (float)(p1_ - p0_);
    LANE_STORE(a, c, partial, shift + s1 / n, fmax(s2 - s1 * s1 / n, 0.0f))
}

KERNEL(S_NAME(batchnorm_backward_partial_nhwc))(KCBUF(S_T, dy, 0), KCBUF(S_T, x_norm, 1), KBUF(float, partial, 2),
                                                KARGS(ChannelSplitArgs, a, 3) KTHREAD_IDS) {
    KSHARED float shared[256];
    LANE_SPLIT(a, c)
    float sdy = 0.0f, sdyx = 0.0f;
    FOR_LANE_PIXEL_BATCHES(a, c, i) {
        float d[LANE_UNROLL], xn[LANE_UNROLL];
        for (int k = 0; k < LANE_UNROLL; ++k) {
            d[k] = LANE_HAS(k) ? S_LD(dy, LANE_AT(a, i, k)) : 0.0f;
            xn[k] = LANE_HAS(k) ? S_LD(x_norm, LANE_AT(a, i, k)) : 0.0f;
        }
        for (int k = 0; k < LANE_UNROLL; ++k) {
            sdy += d[k];
            sdyx += d[k] * xn[k];
        }
    }
    LANE_SUM(shared, sdy, a.lanes)
    LANE_SUM(shared, sdyx, a.lanes)
    LANE_STORE(a, c, partial, sdy, sdyx)
}

KERNEL(S_NAME(batchnorm_activate_backward_partial_nhwc))(KBUF(S_T, dy, 0), KCBUF(S_T, y, 1), KCBUF(S_T, x_norm, 2),
                                                         KCBUF(float, scale, 3), KCBUF(float, bias, 4),
                                                         KBUF(float, partial, 5), KARGS(ChannelSplitArgs, a, 6)
                                                             KTHREAD_IDS) {
    KSHARED float shared[256];
    LANE_SPLIT(a, c)
    int from_output = act_gradient_from_output(a.act);
    float kc = c >= 0 ? scale[c] : 0.0f, bc = c >= 0 ? bias[c] : 0.0f, sdy = 0.0f, sdyx = 0.0f;
    FOR_LANE_PIXEL_BATCHES(a, c, i) {
        float g[LANE_UNROLL], v[LANE_UNROLL], xn[LANE_UNROLL];
        for (int k = 0; k < LANE_UNROLL; ++k) {
            g[k] = LANE_HAS(k) ? S_LD(dy, LANE_AT(a, i, k)) : 0.0f;
            xn[k] = LANE_HAS(k) ? S_LD(x_norm, LANE_AT(a, i, k)) : 0.0f;
            v[k] = !from_output ? xn[k] * kc + bc : (LANE_HAS(k) ? S_LD(y, LANE_AT(a, i, k)) : 0.0f);
        }
        // every k's gradient unguarded (a missing pixel's g is 0, its d 0), in one block: see FOR_NHWC_ELEMENT
        ACT_SPECIALIZED(a.act, for (int k = 0; k < LANE_UNROLL; ++k) g[k] = S_ROUND(g[k] * act_gradient(v[k], act_, S_FAST_MATH));)
        for (int k = 0; k < LANE_UNROLL; ++k) {
            if (LANE_HAS(k)) S_ST(dy, LANE_AT(a, i, k), g[k]);  // summed as stored, as in the NCHW kernel
            sdy += g[k];
            sdyx += g[k] * xn[k];
        }
    }
    LANE_SUM(shared, sdy, a.lanes)
    LANE_SUM(shared, sdyx, a.lanes)
    LANE_STORE(a, c, partial, sdy, sdyx)
}

// The elementwise passes: NHWC_PASSes (layout_index.h) over the N*H*W pixels; BN_AT(k): row k's
// element of this thread's channel.
#define BN_AT(k) (NHWC_ROW(k) * (uint)a.channels + c)

KERNEL(S_NAME(batchnorm_normalize_nhwc))(KBUF(S_T, y, 0), KBUF(S_T, x_norm, 1), KCBUF(float, mean, 2),
                                         KCBUF(float, var, 3), KCBUF(float, scale, 4), KCBUF(float, bias, 5),
                                         KARGS(BatchnormTrainArgs, a, 6) KTHREAD_IDS) {
    NHWC_PASS(a.channels, a.batch * a.plane, c)
    float m = mean[c], sd = sqrt(var[c] + a.eps), inv = 1.0f / sd, k = scale[c], b = bias[c];
    float v[NHWC_PASS_ELEMENTS] = {0}, xn[NHWC_PASS_ELEMENTS];
    FOR_NHWC_ROW(e) v[e] = S_LD(y, BN_AT(e));
    ACT_SPECIALIZED(a.act, FOR_NHWC_ELEMENT(e) {
        // normalize_at's division in fp32 storage; half storage multiplies by the reciprocal (an ulp
        // of float apart, under a half's rounding) instead of an IEEE division per element
        xn[e] = S_FAST_MATH ? (v[e] - m) * inv : (v[e] - m) / sd;
        v[e] = act_forward(xn[e] * k + b, act_, S_FAST_MATH);
    })
    FOR_NHWC_ROW(e) {
        S_ST(x_norm, BN_AT(e), xn[e]);
        S_ST(y, BN_AT(e), v[e]);
    }
}

KERNEL(S_NAME(batchnorm_backward_data_nhwc))(KBUF(S_T, dy, 0), KCBUF(S_T, x_norm, 1), KCBUF(float, scale, 2),
                                             KCBUF(float, var, 3), KCBUF(float, sums, 4),
                                             KARGS(BatchnormTrainArgs, a, 5) KTHREAD_IDS) {
    NHWC_PASS(a.channels, a.batch * a.plane, c)
    float count = (float)a.batch * (float)a.plane;
    float k = scale[c], inv = 1.0f / sqrt(var[c] + a.eps);
    float gmean = k * sums[2 * c] / count;
    float gx = k * sums[2 * c + 1] / (count > 1.0f ? count - 1.0f : 1.0f);
    float d[NHWC_PASS_ELEMENTS], xn[NHWC_PASS_ELEMENTS];
    FOR_NHWC_ROW(e) {
        d[e] = S_LD(dy, BN_AT(e));
        xn[e] = S_LD(x_norm, BN_AT(e));
    }
    FOR_NHWC_ROW(e) S_ST(dy, BN_AT(e), inv * (k * d[e] - gmean - xn[e] * gx));
}

// ---- activations ---------------------------------------------------------------------------------
// dy *= act'(x) for an elementwise activation (x = the pre-activation). n = elements.
KERNEL(S_NAME(activate_backward))(KCBUF(S_T, x, 0), KBUF(S_T, dy, 1), KARGS(ActivateBackwardArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    S_ST(dy, i, S_LD(dy, i) * act_gradient(S_LD(x, i), a.act, S_FAST_MATH));
}

// normalize_channels(_softmax) backward in place, one thread per (sample, pixel): with
// y_c = f(x_c) / S, S = eps + sum_k f(x_k) (f = relu or exp): dL/dx_c = f'(x_c) * (g_c - sum_k g_k y_k) / S.
// n = batch * plane threads.
KERNEL(S_NAME(normalize_channels_backward))(KCBUF(S_T, x, 0), KBUF(S_T, dy, 1),
                                            KARGS(NormalizeChannelsBackwardArgs, a, 2) KTHREAD_IDS) {
    uint t = KGID;
    if (t >= (uint)a.n) return;
    int p = (int)(t % (uint)a.plane);
    int base = (int)(t / (uint)a.plane) * a.channels * a.plane + p;
    float S = 0.0001f, gy = 0.0f;
    for (int c = 0; c < a.channels; ++c) S += normalize_channels_f(S_LD(x, base + c * a.plane), a.softmax);
    for (int c = 0; c < a.channels; ++c) {
        int i = base + c * a.plane;
        gy += S_LD(dy, i) * normalize_channels_f(S_LD(x, i), a.softmax) / S;
    }
    for (int c = 0; c < a.channels; ++c) {
        int i = base + c * a.plane;
        float v = S_LD(x, i);
        float df = a.softmax ? exp(v) : (v > 0.0f ? 1.0f : 0.0f);
        S_ST(dy, i, df * (S_LD(dy, i) - gy) / S);
    }
}

// ---- pooling (gathers, see kernels/backward.h) --------------------------------------------------
// The argmax of window i (first strictly greatest in row-major window order, as the reference), as
// the pixel iy * in_w + ix of its input plane (whose pixel 0 is at pool_plane(i), kernels/backward.h), or
// -1 for a window with no input inside it. Either layout (layout_index.h), as every pooling kernel here,
// though the max pooling ones run NCHW tensors only: NHWC ones take the _nhwc twins below.
KFN int S_NAME(pool_argmax)(KGLOBAL const S_T* x, uint i, KARGS_PARAM(PoolArgs) a) {
    int pix = layout_pixel((int)i, a.channels, a.out_w * a.out_h, a.nhwc);
    int ox = pix % a.out_w, oy = pix / a.out_w;
    int plane0 = pool_plane(i, a), step = layout_step(a.channels, a.nhwc);
    int off = -a.padding / 2, best_at = -1;
    float best = -FLT_MAX_K;
    for (int ky = 0; ky < a.size; ++ky)
        for (int kx = 0; kx < a.size; ++kx) {
            int y = oy * a.stride_y + off + ky, xx = ox * a.stride_x + off + kx;
            if (y < 0 || y >= a.in_h || xx < 0 || xx >= a.in_w) continue;
            float v = S_LD(x, plane0 + (y * a.in_w + xx) * step);
            if (v > best) best = v, best_at = y * a.in_w + xx;
        }
    return best_at;
}

// maxpool backward pass 1, one thread per dy element (n = elements of dx, threads = elements of dy):
// each window's argmax.
KERNEL(S_NAME(maxpool_argmax))(KCBUF(S_T, x, 0), KBUF(int, winner, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)(a.out_h * a.out_w) * (uint)(a.n / (a.in_h * a.in_w))) return;
    winner[i] = S_NAME(pool_argmax)(x, i, a);
}

// Windows that do not overlap (stride >= size in both axes, as yolov4-tiny's 2x2/2 pools): both passes in
// one, one thread per window, which adds its dy onto the dx of its argmax; no other window touches that
// element, so the scatter has no race and gives the gather's bits. Threads = elements of dy.
KERNEL(S_NAME(maxpool_backward_disjoint))(KCBUF(S_T, x, 0), KCBUF(S_T, dy, 1), KBUF(S_T, dx, 2),
                                          KARGS(PoolArgs, a, 3) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)(a.out_h * a.out_w) * (uint)(a.n / (a.in_h * a.in_w))) return;
    int best_at = S_NAME(pool_argmax)(x, i, a);
    int at = pool_plane(i, a) + best_at * layout_step(a.channels, a.nhwc);
    if (best_at >= 0) S_ST(dx, at, S_LD(dx, at) + S_LD(dy, i));
}

// Pass 2, one thread per dx element (n = elements of dx): the dy of every covering window this
// element won, added in the reference's (oy, ox) order onto dx.
KERNEL(S_NAME(maxpool_backward))(KCBUF(int, winner, 0), KCBUF(S_T, dy, 1), KBUF(S_T, dx, 2),
                                 KARGS(PoolArgs, a, 3) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int in_plane = a.in_h * a.in_w, me = layout_pixel((int)i, a.channels, in_plane, a.nhwc);
    int ix = me % a.in_w, iy = me / a.in_w, step = layout_step(a.channels, a.nhwc);
    int obase = layout_base((int)i, a.channels, in_plane, a.out_h * a.out_w, a.nhwc);
    int off = -a.padding / 2, ty = iy - off, tx = ix - off;
    float acc = S_LD(dx, i);
    for (int oy = pool_first(ty, a.size, a.stride_y); oy <= pool_last(ty, a.stride_y, a.out_h); ++oy)
        for (int ox = pool_first(tx, a.size, a.stride_x); ox <= pool_last(tx, a.stride_x, a.out_w); ++ox) {
            int o = obase + (oy * a.out_w + ox) * step;
            if (winner[o] == me) acc += S_LD(dy, o);
        }
    S_ST(dx, i, acc);
}

// The same three on NHWC tensors, NHWC_RUNs (layout_index.h; a.n = elements of dx) that find their
// windows' argmax with MAXPOOL_NHWC_ARGMAX (storage_kernels.h): the same comparisons, the same bits.
// Pass 1 over dy's N * out_h rows: winner in dy's layout, as maxpool_argmax.
KERNEL(S_NAME(maxpool_argmax_nhwc))(KCBUF(S_T, x, 0), KBUF(int, winner, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    NHWC_RUN(a.channels, a.n / (a.channels * a.in_h * a.in_w) * a.out_h, a.out_w, c, row, x0)
    MAXPOOL_NHWC_ARGMAX(x, a, c, row, x0, n, best, at)
    FOR_NHWC_RUN(k, x0, a.out_w) winner[(row * a.out_w + x0 + k) * a.channels + c] = at[k];
}

// Windows that do not overlap, over dy's rows: every load (dy, x, then the winners' dx) before a store.
KERNEL(S_NAME(maxpool_backward_disjoint_nhwc))(KCBUF(S_T, x, 0), KCBUF(S_T, dy, 1), KBUF(S_T, dx, 2),
                                               KARGS(PoolArgs, a, 3) KTHREAD_IDS) {
    NHWC_RUN(a.channels, a.n / (a.channels * a.in_h * a.in_w) * a.out_h, a.out_w, c, row, x0)
    float d[NHWC_PASS_ELEMENTS];
    FOR_NHWC_RUN(k, x0, a.out_w) d[k] = S_LD(dy, (row * a.out_w + x0 + k) * a.channels + c);
    MAXPOOL_NHWC_ARGMAX(x, a, c, row, x0, n, best, at)
    int image = n * a.in_h * a.in_w;
    FOR_NHWC_RUN(k, x0, a.out_w) if (at[k] >= 0) d[k] = S_LD(dx, (image + at[k]) * a.channels + c) + d[k];
    FOR_NHWC_RUN(k, x0, a.out_w) if (at[k] >= 0) S_ST(dx, (image + at[k]) * a.channels + c, d[k]);
}

// Pass 2 over dx's N * in_h rows: pixel me + k of the run takes the dy of every window whose winner it
// is. A window's winner lies inside it, so the windows that cover any pixel of the run (oy as for one
// pixel, ox from the run's first pixel's first to its last pixel's last) are all there is to look at,
// each read once for the whole run, in (oy, ox) order: per pixel the sum of maxpool_backward.
KERNEL(S_NAME(maxpool_backward_nhwc))(KCBUF(int, winner, 0), KCBUF(S_T, dy, 1), KBUF(S_T, dx, 2),
                                      KARGS(PoolArgs, a, 3) KTHREAD_IDS) {
    NHWC_RUN(a.channels, a.n / (a.channels * a.in_w), a.in_w, c, row, x0)
    int n = row / a.in_h, iy = row - n * a.in_h, me = iy * a.in_w + x0, pad = a.padding / 2;
    int last = x0 + NHWC_PASS_ELEMENTS < a.in_w ? x0 + NHWC_PASS_ELEMENTS - 1 : a.in_w - 1;
    float acc[NHWC_PASS_ELEMENTS];
    FOR_NHWC_RUN(k, x0, a.in_w) acc[k] = S_LD(dx, (row * a.in_w + x0 + k) * a.channels + c);
    int ox0 = pool_first(x0 + pad, a.size, a.stride_x), ox1 = pool_last(last + pad, a.stride_x, a.out_w);
    for (int oy = pool_first(iy + pad, a.size, a.stride_y); oy <= pool_last(iy + pad, a.stride_y, a.out_h); ++oy)
        for (int ox = ox0; ox <= ox1; ++ox) {
            int o = ((n * a.out_h + oy) * a.out_w + ox) * a.channels + c, w = winner[o];
            float d = S_LD(dy, o);
            FOR_NHWC_RUN(k, x0, a.in_w) if (w == me + k) acc[k] += d;
        }
    FOR_NHWC_RUN(k, x0, a.in_w) S_ST(dx, (row * a.in_w + x0 + k) * a.channels + c, acc[k]);
}

// avgpool_local backward: each window shares its dy equally among its in-bounds inputs (count of
// them, not size*size, as the forward divides). x is not read (bound for the contract's signature).
KERNEL(S_NAME(avgpool_local_backward))(KCBUF(S_T, dy, 0), KBUF(S_T, dx, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int in_plane = a.in_h * a.in_w, pix = layout_pixel((int)i, a.channels, in_plane, a.nhwc);
    int ix = pix % a.in_w, iy = pix / a.in_w, step = layout_step(a.channels, a.nhwc);
    int obase = layout_base((int)i, a.channels, in_plane, a.out_h * a.out_w, a.nhwc);
    int off = -a.padding / 2, ty = iy - off, tx = ix - off;
    float acc = S_LD(dx, i);
    for (int oy = pool_first(ty, a.size, a.stride_y); oy <= pool_last(ty, a.stride_y, a.out_h); ++oy)
        for (int ox = pool_first(tx, a.size, a.stride_x); ox <= pool_last(tx, a.stride_x, a.out_w); ++ox) {
            // in-bounds part of the window, clipped per axis
            int y0 = oy * a.stride_y + off, x0 = ox * a.stride_x + off;
            int y1 = y0 + a.size < a.in_h ? y0 + a.size : a.in_h, x1 = x0 + a.size < a.in_w ? x0 + a.size : a.in_w;
            int count = (y1 - (y0 > 0 ? y0 : 0)) * (x1 - (x0 > 0 ? x0 : 0));
            acc += S_LD(dy, obase + (oy * a.out_w + ox) * step) / (float)count;
        }
    S_ST(dx, i, acc);
}

// ---- data movement and shortcut -------------------------------------------------------------------
// upsample backward: dx[y, x] += scale * sum of the stride x stride block of dy it was copied to
// (rows/columns beyond dy's size skipped). n = elements of dx.
KERNEL(S_NAME(upsample_backward))(KCBUF(S_T, dy, 0), KBUF(S_T, dx, 1), KARGS(ResampleArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int in_plane = a.in_h * a.in_w, pix = layout_pixel((int)i, a.channels, in_plane, a.nhwc);
    int ix = pix % a.in_w, iy = pix / a.in_w, step = layout_step(a.channels, a.nhwc);
    int obase = layout_base((int)i, a.channels, in_plane, a.out_h * a.out_w, a.nhwc);
    float acc = S_LD(dx, i);
    for (int sy = 0; sy < a.stride; ++sy)
        for (int sx = 0; sx < a.stride; ++sx) {
            int y = iy * a.stride + sy, xx = ix * a.stride + sx;
            if (y < a.out_h && xx < a.out_w) acc += a.scale * S_LD(dy, obase + (y * a.out_w + xx) * step);
        }
    S_ST(dx, i, acc);
}

// Shortcut data gradient of one input (launch per input; input 0 = x with from_sample = sample):
// din[b, i] += dy[b, i] * w_input(i) for i < min(sample, from_sample). weights (fp32) is not read
// when weights_mode = 0 (bind any buffer). n = batch * min(sample, from_sample) threads.
KERNEL(S_NAME(shortcut_backward))(KCBUF(float, weights, 0), KCBUF(S_T, dy, 1), KBUF(S_T, din, 2),
                                  KARGS(ShortcutBackwardArgs, a, 3) KTHREAD_IDS) {
    uint t = KGID;
    if (t >= (uint)a.n) return;
    int m = a.sample < a.from_sample ? a.sample : a.from_sample;
    int b = (int)(t / (uint)m), i = (int)(t % (uint)m);
    float w = 1.0f;
    if (a.weights_mode != 0) {
        int per_channel = a.weights_mode == 2;
        w = shortcut_grad_weight(weights, per_channel ? i / a.plane : 0, per_channel ? a.channels : 1, a.inputs,
                                 a.norm, a.input);
    }
    int o = b * a.from_sample + i;
    S_ST(din, o, S_LD(din, o) + S_LD(dy, b * a.sample + i) * w);
}

// Shortcut weight gradient, the part that flows through input k = a.input (launch once per input, in
// order); the derivation is at shortcut_grad_weight (kernels/backward.h). weights and dweights fp32,
// dy and the input in S. Grid: one group per weight group (1 per_feature, channels per_channel).
KERNEL(S_NAME(shortcut_weights_backward))(KCBUF(float, weights, 0), KCBUF(S_T, dy, 1), KCBUF(S_T, inp, 2),
                                          KBUF(float, dweights, 3), KARGS(ShortcutBackwardArgs, a, 4) KTHREAD_IDS) {
    KSHARED float partial[256];
    int per_channel = a.weights_mode == 2;
    int widx = (int)KGROUP, step = per_channel ? a.channels : 1;
    // this group's features of a sample, [lo, hi), where the input has them
    int m = a.sample < a.from_sample ? a.sample : a.from_sample;
    int lo = per_channel ? widx * a.plane : 0, hi = per_channel ? lo + a.plane : m;
    hi = hi < m ? hi : m;
    int len = hi > lo ? hi - lo : 0;
    float p = 0.0f;
    for (int e = (int)KLID; e < a.batch * len; e += (int)KGROUP_SIZE) {
        int b = e / len, i = lo + e % len;
        p += S_LD(dy, b * a.sample + i) * S_LD(inp, b * a.from_sample + i);
    }
    GROUP_SUM(partial, p)
    int k = a.input;
    float mx = shortcut_grad_raw_max(weights, widx, step, a.inputs);
    float S = a.norm == 0 ? 1.0f : shortcut_grad_denominator(weights, widx, step, a.inputs, a.norm, mx);
    int kmax = shortcut_grad_argmax(weights, widx, step, a.inputs);
    float wk = a.norm == 0 ? weights[widx + k * step] : shortcut_grad_term(weights[widx + k * step], mx, a.norm) / S;
    for (int j = (int)KLID; j < a.inputs; j += (int)KGROUP_SIZE) {
        float raw_j = weights[widx + j * step], same = j == k ? 1.0f : 0.0f, dwk;
        if (a.norm == 0) dwk = same;
        else if (a.norm == 1) dwk = raw_j > 0.0f ? (same - wk) / S : 0.0f;
        else dwk = wk * (same - shortcut_grad_term(raw_j, mx, 2) / S) - (j == kmax ? wk * 0.0001f / S : 0.0f);
        dweights[widx + j * step] += dwk * p;
    }
}
