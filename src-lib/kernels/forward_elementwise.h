// Kernel text of the elementwise and per-channel forward ops, the optimizer steps and dropout's mask
// (device-only text: OpenCL C 1.2 / CUDA / MSL through the compat macros; args in args_forward.h).
//
// Launch geometry, every kernel of this file: one thread per element, threads = args.n rounded up to
// a multiple of the group size (any group size: each thread guards i < n); normalize_channels_f32 and
// batchnorm_fold_f32 have their own n (see there). Buffers are whole tensors; outputs come first.
#pragma once
#include "activation_math.h"
#include "args_forward.h"
#include "dropout.h"

// normalize_channels / normalize_channels_softmax in place: one thread per (sample, pixel),
// threads = batch * plane. y_c = f(x_c) / (0.0001 + sum_k f(x_k)) with f = relu or exp (no max
// subtraction, as the reference backend); relu form: y_c = 0 where x_c <= 0.
KERNEL(normalize_channels_f32)(KBUF(float, y, 0), KARGS(NormalizeChannelsArgs, a, 1) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int base = (i / a.plane) * a.channels * a.plane + i % a.plane;
    int relu_form = a.act == ACT_NORMALIZE_CHANNELS;
    float sum = 0.0001f;
    for (int c = 0; c < a.channels; ++c) {
        float v = y[base + c * a.plane];
        sum += relu_form ? (v > 0 ? v : 0.0f) : exp(v);
    }
    for (int c = 0; c < a.channels; ++c) {
        float v = y[base + c * a.plane];
        y[base + c * a.plane] = relu_form ? (v > 0 ? v / sum : 0.0f) : exp(v) / sum;
    }
}

// y = (y - mean) / sqrt(var + eps) * scale + bias, per channel, in place
KERNEL(batchnorm_inference_f32)(KBUF(float, y, 0), KCBUF(float, mean, 1), KCBUF(float, var, 2),
                                KCBUF(float, scale, 3), KCBUF(float, bias, 4), KARGS(BatchnormArgs, a, 5) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int c = (i / a.plane) % a.channels;
    y[i] = (y[i] - mean[c]) / sqrt(var[c] + a.eps) * scale[c] + bias[c];
}

// Batchnorm folded into a per-channel affine; threads = channels (a.n).
KERNEL(batchnorm_fold_f32)(KBUF(float, scale_out, 0), KBUF(float, shift_out, 1), KCBUF(float, scales, 2),
                           KCBUF(float, biases, 3), KCBUF(float, mean, 4), KCBUF(float, var, 5),
                           KARGS(BatchnormFoldArgs, a, 6) KTHREAD_IDS) {
    int c = (int)KGID;
    if (c >= a.n) return;
    float k = scales[c] / sqrt(var[c] + a.eps);
    scale_out[c] = k;
    shift_out[c] = biases[c] - mean[c] * k;
}

// rolling = keep * rolling + (1 - keep) * batch_value
KERNEL(rolling_update_f32)(KBUF(float, rolling, 0), KCBUF(float, batch_value, 1), KARGS(RollingArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    rolling[i] = a.keep * rolling[i] + (1.0f - a.keep) * batch_value[i];
}

// y = p * q elementwise (sam)
KERNEL(mul_f32)(KBUF(float, y, 0), KCBUF(float, p, 1), KCBUF(float, q, 2), KARGS(CountArgs, a, 3) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    y[i] = p[i] * q[i];
}

// y = from * s: s[n,c] per channel, or with scale_wh s[n,0,pixel] per pixel; n = elements of from
KERNEL(scale_channels_f32)(KBUF(float, y, 0), KCBUF(float, s, 1), KCBUF(float, from, 2),
                           KARGS(ScaleChannelsArgs, a, 3) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int k = a.scale_wh ? (i / (a.channels * a.plane)) * a.plane + i % a.plane : i / a.plane;
    y[i] = from[i] * s[k];
}

// mask[i] = 0 with probability p, else 1 / (1 - p) (dropout.h: identical on every backend)
KERNEL(dropout_mask_f32)(KBUF(float, mask, 0), KARGS(DropoutArgs, a, 1) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    mask[i] = dropout_scale(a.seed_lo, a.seed_hi, (uint32_t)i, a.probability);
}

// Darknet's SGD step (kernels/optimizer.h sgd_step): m = m - grad - decay*batch*w; w += lr/batch * m;
// m *= momentum; grad = 0. skip[0] != 0 (fp16 training's overflow flag, unscale_check's found): the
// step only drops the gradient, w and m stay (the device decides: the host never waits for the flag).
KERNEL(sgd_update_f32)(KBUF(float, w, 0), KBUF(float, grad, 1), KBUF(float, m, 2), KCBUF(float, skip, 3),
                       KARGS(SgdArgs, a, 4) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    if (skip[0] != 0.0f) {
        grad[i] = 0.0f;
        return;
    }
    float upd = m[i] - grad[i] - a.decay * (float)a.batch * w[i];
    w[i] += a.lr / (float)a.batch * upd;
    m[i] = a.momentum * upd;
    grad[i] = 0.0f;
}

// Darknet's Adam step (kernels/optimizer.h adam_step), t = update count from 1; skip as sgd_update's.
KERNEL(adam_update_f32)(KBUF(float, w, 0), KBUF(float, grad, 1), KBUF(float, m, 2), KBUF(float, v, 3),
                        KCBUF(float, skip, 4), KARGS(AdamArgs, a, 5) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    if (skip[0] != 0.0f) {
        grad[i] = 0.0f;
        return;
    }
    float d = -grad[i] - a.decay * (float)a.batch * w[i];
    m[i] = a.b1 * m[i] + (1.0f - a.b1) * d;
    v[i] = a.b2 * v[i] + (1.0f - a.b2) * d * d;
    float mhat = m[i] / (1.0f - pow(a.b1, (float)a.t));
    float vhat = v[i] / (1.0f - pow(a.b2, (float)a.t));
    w[i] += a.lr * mhat / (sqrt(fabs(vhat)) + a.eps);
    grad[i] = 0.0f;
}

// Dynamic loss scaling's unscale of one fp32 gradient: grad *= factor, and found[0] = 1 where a
// result is not finite (inf or NaN: the scaled loss overflowed; the caller skips the step). found is
// zeroed by the caller and never cleared here; every thread that finds one writes the same 1.
KERNEL(unscale_check_f32)(KBUF(float, grad, 0), KBUF(float, found, 1), KARGS(UnscaleArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    float g = grad[i] * a.factor;
    grad[i] = g;
    if (!isfinite(g)) found[0] = 1.0f;
}
