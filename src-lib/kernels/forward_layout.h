// Kernel text of the forward ops that move, combine or reduce elements: downsample, reorg, global and
// depth pooling and softmax (device-only text through the compat macros; args in args_forward.h).
// Route, upsample, shortcut, local pooling, im2col and the axis swap are in storage_kernels.h (every
// storage type).
//
// Launch geometry: one thread per output element, threads = args.n rounded up to a multiple of the
// group size (any group size), except where a kernel says otherwise (avgpool_global_f32: one group per plane; softmax_f32: one thread per group of a sample).
#pragma once
#include "args_forward.h"
#include "group_sum.h"

// y = sum over each stride x stride block of scale * x (rows/columns past out*stride belong to no
// block); threads = elements of y. Summed in the reference's row-major order, so results are exact.
KERNEL(downsample_sum_f32)(KBUF(float, y, 0), KCBUF(float, x, 1), KARGS(ResampleArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int ox = i % a.out_w, oy = (i / a.out_w) % a.out_h, nc = i / (a.out_w * a.out_h);
    float acc = 0.0f;
    for (int ky = 0; ky < a.stride; ++ky)
        for (int kx = 0; kx < a.stride; ++kx)
            acc += a.scale * x[(nc * a.in_h + oy * a.stride + ky) * a.in_w + ox * a.stride + kx];
    y[i] = acc;
}

// Darknet's reorg_cpu over a w x h x c loop (c divisible by stride^2, so the map is a permutation):
// thread = the loop's in_index (threads = elements of x); forward: y[out] = x[in], else y[in] = x[out].
KERNEL(reorg_f32)(KBUF(float, y, 0), KCBUF(float, x, 1), KARGS(ReorgArgs, a, 2) KTHREAD_IDS) {
    int in = (int)KGID;
    if (in >= a.n) return;
    int i = in % a.w, j = (in / a.w) % a.h, k = (in / (a.w * a.h)) % a.c, b = in / (a.w * a.h * a.c);
    int out_c = a.c / (a.stride * a.stride);
    int c2 = k % out_c, offset = k / out_c;
    int w2 = i * a.stride + offset % a.stride, h2 = j * a.stride + offset / a.stride;
    int out = w2 + a.w * a.stride * (h2 + a.h * a.stride * (c2 + out_c * b));
    if (a.forward) y[out] = x[in];
    else y[in] = x[out];
}

// Input k's normalised shortcut weight at weight index widx (per_feature: 0, step 1; per_channel: the
// channel, step = channels); raw weights of input k sit at widx + k * step. Darknet's
// shortcut_multilayer_cpu: relu: max(w,0) / (0.0001 + sum max(w,0)); softmax: e^(w-max) / (0.0001 + sum).
KFN float shortcut_weight(KGLOBAL const float* weights, int widx, int step, int inputs, int k, int norm) {
    float raw = weights[widx + k * step];
    if (norm == 0) return raw;
    float mx = -FLT_MAX_K, sum = 0.0001f;
    for (int j = 0; j < inputs; ++j) mx = fmax(mx, weights[widx + j * step]);
    for (int j = 0; j < inputs; ++j) {
        float v = weights[widx + j * step];
        sum += norm == 1 ? (v > 0 ? v : 0.0f) : exp(v - mx);
    }
    return norm == 1 ? (raw > 0 ? raw : 0.0f) / sum : exp(raw - mx) / sum;
}

// y[plane] = mean of x's plane. Geometry: exactly one group per (n, c) plane (groups = N*C), group
// size a power of two <= 256. Each thread sums a strided slice, then a fixed-order tree in threadgroup
// memory: deterministic for a given group size. No early return: every thread reaches every barrier.
KERNEL(avgpool_global_f32)(KBUF(float, y, 0), KCBUF(float, x, 1), KARGS(GlobalPoolArgs, a, 2) KTHREAD_IDS) {
    KSHARED float partial[256];
    int lid = (int)KLID, size = (int)KGROUP_SIZE, base = (int)KGROUP * a.plane;
    float sum = 0.0f;
    for (int j = lid; j < a.plane; j += size) sum += x[base + j];
    GROUP_SUM(partial, sum)
    if (lid == 0) y[KGROUP] = sum / (float)a.plane;
}

// y[n,c] = max over input channels k with k % out_c == c; threads = elements of y
KERNEL(maxpool_depth_f32)(KBUF(float, y, 0), KCBUF(float, x, 1), KARGS(MaxpoolDepthArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int p = i % a.plane, c = (i / a.plane) % a.out_c, b = i / (a.plane * a.out_c);
    float best = -FLT_MAX_K;
    for (int k = c; k < a.in_c; k += a.out_c) best = fmax(best, x[(b * a.in_c + k) * a.plane + p]);
    y[i] = best;
}

// Softmax with temperature over each group of group_size consecutive features of a sample, the
// group starting at sample * b + g * group_size. One thread per (sample, group): threads = batch * groups.
KERNEL(softmax_f32)(KBUF(float, y, 0), KCBUF(float, x, 1), KARGS(SoftmaxArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int base = (i / a.groups) * a.sample + (i % a.groups) * a.group_size;
    float t = a.temperature, largest = -FLT_MAX_K, sum = 0.0f;
    for (int j = 0; j < a.group_size; ++j) largest = fmax(largest, x[base + j]);
    for (int j = 0; j < a.group_size; ++j) sum += exp(x[base + j] / t - largest / t);
    for (int j = 0; j < a.group_size; ++j) y[base + j] = exp(x[base + j] / t - largest / t) / sum;
}

