// Backward kernels of the activation, pooling, data-movement and combining ops (device kernels only).
// Where several dy elements feed one dx element the kernels GATHER: one thread per dx element finds
// its contributions, adds them in the reference's loop order and adds the sum to dx (accumulating, as
// every backward op). No atomics, so results are deterministic. Sums over many elements (scale_channels'
// ds, softmax, shortcut weights) run one group per result (power-of-two group size <= 256) with
// GROUP_SUM (group_sum.h).
#pragma once
#include "activation_math.h"
#include "args_forward.h"
#include "args_training.h"
#include "group_sum.h"

// dy *= act'(x) for an elementwise activation (x = the pre-activation). n = elements.
KERNEL(activate_backward_f32)(KCBUF(float, x, 0), KBUF(float, dy, 1), KARGS(ActivateBackwardArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    dy[i] *= act_gradient(x[i], a.act);
}

// normalize_channels(_softmax) backward in place, one thread per (sample, pixel): with
// y_c = f(x_c) / S, S = eps + sum_k f(x_k) (f = relu or exp): dL/dx_c = f'(x_c) * (g_c - sum_k g_k y_k) / S.
// n = batch * plane threads.
KFN float normalize_channels_f(float v, int softmax) { return softmax ? exp(v) : (v > 0.0f ? v : 0.0f); }

KERNEL(normalize_channels_backward_f32)(KCBUF(float, x, 0), KBUF(float, dy, 1),
                                        KARGS(NormalizeChannelsBackwardArgs, a, 2) KTHREAD_IDS) {
    uint t = KGID;
    if (t >= (uint)a.n) return;
    int p = (int)(t % (uint)a.plane);
    int base = (int)(t / (uint)a.plane) * a.channels * a.plane + p;
    float S = 0.0001f, gy = 0.0f;
    for (int c = 0; c < a.channels; ++c) S += normalize_channels_f(x[base + c * a.plane], a.softmax);
    for (int c = 0; c < a.channels; ++c) {
        int i = base + c * a.plane;
        gy += dy[i] * normalize_channels_f(x[i], a.softmax) / S;
    }
    for (int c = 0; c < a.channels; ++c) {
        int i = base + c * a.plane;
        float v = x[i];
        float df = a.softmax ? exp(v) : (v > 0.0f ? 1.0f : 0.0f);
        dy[i] = df * (dy[i] - gy) / S;
    }
}

// ---- pooling --------------------------------------------------------------------------------
// The window of output (oy, ox) covers input rows oy * stride_y - padding/2 + [0, size). The output
// rows whose window holds input row iy: oy in [ceil((t - size + 1) / stride), t / stride], t = iy + padding/2.
KFN int pool_first(int t, int size, int stride) { return t - size + 1 <= 0 ? 0 : (t - size + stride) / stride; }
KFN int pool_last(int t, int stride, int out) { return t / stride < out - 1 ? t / stride : out - 1; }

// maxpool backward in two passes, each a gather. Re-running every covering window's argmax per dx
// element costs size^4 reads per element (yolov7-tiny's SPP pools of size 13: 28561, half of its
// training step); remembering each window's winner costs size^2 per pass.
// Pass 1, one thread per dy element (n = elements of dy): the forward's argmax of its window (first
// strictly greatest in row-major window order, as the reference), as iy * in_w + ix within the
// plane, or -1 for a window with no input inside it.
KERNEL(maxpool_argmax_f32)(KCBUF(float, x, 0), KBUF(int, winner, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)(a.out_h * a.out_w) * (uint)(a.n / (a.in_h * a.in_w))) return;
    int ox = (int)(i % (uint)a.out_w), oy = (int)((i / (uint)a.out_w) % (uint)a.out_h);
    int nc = (int)(i / (uint)(a.out_w * a.out_h));  // sample * channels + channel
    KGLOBAL const float* xp = x + nc * a.in_h * a.in_w;
    int off = -a.padding / 2, best_at = -1;
    float best = -FLT_MAX_K;
    for (int ky = 0; ky < a.size; ++ky)
        for (int kx = 0; kx < a.size; ++kx) {
            int y = oy * a.stride_y + off + ky, xx = ox * a.stride_x + off + kx;
            if (y < 0 || y >= a.in_h || xx < 0 || xx >= a.in_w) continue;
            float v = xp[y * a.in_w + xx];
            if (v > best) best = v, best_at = y * a.in_w + xx;
        }
    winner[i] = best_at;
}

// Pass 2, one thread per dx element (n = elements of dx): the dy of every covering window this
// element won, added in the reference's (oy, ox) order onto dx.
KERNEL(maxpool_backward_f32)(KCBUF(int, winner, 0), KCBUF(float, dy, 1), KBUF(float, dx, 2),
                             KARGS(PoolArgs, a, 3) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int ix = (int)(i % (uint)a.in_w), iy = (int)((i / (uint)a.in_w) % (uint)a.in_h);
    int nc = (int)(i / (uint)(a.in_w * a.in_h));
    int off = -a.padding / 2, ty = iy - off, tx = ix - off, me = iy * a.in_w + ix;
    float acc = dx[i];
    for (int oy = pool_first(ty, a.size, a.stride_y); oy <= pool_last(ty, a.stride_y, a.out_h); ++oy)
        for (int ox = pool_first(tx, a.size, a.stride_x); ox <= pool_last(tx, a.stride_x, a.out_w); ++ox) {
            int o = (nc * a.out_h + oy) * a.out_w + ox;
            if (winner[o] == me) acc += dy[o];
        }
    dx[i] = acc;
}

// avgpool_local backward: each window shares its dy equally among its in-bounds inputs (count of
// them, not size*size, as the forward divides). x is not read (bound for the contract's signature).
KERNEL(avgpool_local_backward_f32)(KCBUF(float, dy, 0), KBUF(float, dx, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int ix = (int)(i % (uint)a.in_w), iy = (int)((i / (uint)a.in_w) % (uint)a.in_h);
    int nc = (int)(i / (uint)(a.in_w * a.in_h));
    int off = -a.padding / 2, ty = iy - off, tx = ix - off;
    float acc = dx[i];
    for (int oy = pool_first(ty, a.size, a.stride_y); oy <= pool_last(ty, a.stride_y, a.out_h); ++oy)
        for (int ox = pool_first(tx, a.size, a.stride_x); ox <= pool_last(tx, a.stride_x, a.out_w); ++ox) {
            // in-bounds part of the window, clipped per axis
            int y0 = oy * a.stride_y + off, x0 = ox * a.stride_x + off;
            int y1 = y0 + a.size < a.in_h ? y0 + a.size : a.in_h, x1 = x0 + a.size < a.in_w ? x0 + a.size : a.in_w;
            int count = (y1 - (y0 > 0 ? y0 : 0)) * (x1 - (x0 > 0 ? x0 : 0));
            acc += dy[(nc * a.out_h + oy) * a.out_w + ox] / (float)count;
        }
    dx[i] = acc;
}

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

// ---- data movement --------------------------------------------------------------------------
// upsample backward: dx[y, x] += scale * sum of the stride x stride block of dy it was copied to
// (rows/columns beyond dy's size skipped). n = elements of dx.
KERNEL(upsample_backward_f32)(KCBUF(float, dy, 0), KBUF(float, dx, 1), KARGS(ResampleArgs, a, 2) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int ix = (int)(i % (uint)a.in_w), iy = (int)((i / (uint)a.in_w) % (uint)a.in_h);
    int nc = (int)(i / (uint)(a.in_w * a.in_h));
    float acc = dx[i];
    for (int sy = 0; sy < a.stride; ++sy)
        for (int sx = 0; sx < a.stride; ++sx) {
            int y = iy * a.stride + sy, xx = ix * a.stride + sx;
            if (y < a.out_h && xx < a.out_w) acc += a.scale * dy[(nc * a.out_h + y) * a.out_w + xx];
        }
    dx[i] = acc;
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

// Data gradient of one input (launch per input; input 0 = x with from_sample = sample):
// din[b, i] += dy[b, i] * w_input(i) for i < min(sample, from_sample). weights is not read when
// weights_mode = 0 (bind any buffer). n = batch * min(sample, from_sample) threads.
KERNEL(shortcut_backward_f32)(KCBUF(float, weights, 0), KCBUF(float, dy, 1), KBUF(float, din, 2),
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
    din[b * a.from_sample + i] += dy[b * a.sample + i] * w;
}

// Weight gradient, the part that flows through input k = a.input (launch once per input, in order).
// dL/dw_k = P = sum over the weight group's elements of dy * in_k (a group reduction); then through
// the normalisation to every raw weight j of the group: dweights[widx + j * step] += dw_k/draw_j * P:
//   none: [j == k];  relu: [raw_j > 0] ([j == k] - w_k) / S;
//   softmax: w_k ([j == k] - w_j) - [j == kmax] w_k 0.0001 / S (raw_kmax is also the max subtracted,
//   which rescales the 0.0001 in S: dw_k/dmax = -w_k 0.0001 / S).
// Grid: one group per weight group: 1 (per_feature) or channels (per_channel); group g owns raw
// weights g + j * step. Not launched for weights_mode = 0.
KERNEL(shortcut_weights_backward_f32)(KCBUF(float, weights, 0), KCBUF(float, dy, 1), KCBUF(float, inp, 2),
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
        p += dy[b * a.sample + i] * inp[b * a.from_sample + i];
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
