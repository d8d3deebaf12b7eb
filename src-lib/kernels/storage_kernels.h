// Kernel text written once for every storage type (src-lib/gpu/PRECISION.md): the kernels that
// detection runs on activations. Each is compiled three times, for fp32, fp16 and bf16 storage
// (storage_f32.h etc. define the macros; the kernel names end in _f32, _f16, _bf16):
//   S_T            the element type of activation buffers (float, half, bf16 bits)
//   S_LD(p, i)     element i of p as a float
//   S_ST(p, i, v)  stores float v into element i of p, rounded to nearest even
// Math is fp32 throughout; parameters (scale, shift, shortcut weights) stay fp32 buffers. Launch
// geometry of every kernel here: one thread per element, threads = args.n rounded up to whole
// groups of any size (each thread guards i < n), except shortcut (one launch per input, see there).
#pragma once
#include "activation_math.h"
#include "args_forward.h"

// y = x converted to storage S (pack) and back to fp32 (unpack): the input upload and fp32
// parameters used by a half op (GpuBackend::convert).
KERNEL(S_NAME(pack))(KBUF(S_T, y, 0), KCBUF(float, x, 1), KARGS(CountArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, x[i]);
}

KERNEL(S_NAME(unpack))(KBUF(float, y, 0), KCBUF(S_T, x, 1), KARGS(CountArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    y[i] = S_LD(x, i);
}

// y = act(y) in place, elementwise activations only (the channel-mixing ones: normalize_channels_f32)
KERNEL(S_NAME(activate))(KBUF(S_T, y, 0), KARGS(ActivateArgs, a, 1) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, act_forward(S_LD(y, i), a.act));
}

// Convolution's epilogue in place: y = act(y * scale[c] + shift[c]), scale only when has_scale
// (otherwise bind any buffer to `scale`). Elementwise act only: for the channel-mixing ones launch
// this with ACT_LINEAR, then normalize_channels_f32.
KERNEL(S_NAME(affine_act))(KBUF(S_T, y, 0), KCBUF(float, scale, 1), KCBUF(float, shift, 2),
                           KARGS(AffineActArgs, a, 3) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int c = (i / a.plane) % a.channels;
    float v = S_LD(y, i);
    v = (a.has_scale ? v * scale[c] : v) + shift[c];
    S_ST(y, i, act_forward(v, a.act));
}

// y[:, dst_c0 + c] = (or += with accumulate) x[:, src_c0 + c] for c < count: copy_channels and
// add_channels. threads = batch * count * plane.
KERNEL(S_NAME(copy_channels))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(CopyChannelsArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int p = i % a.plane, c = (i / a.plane) % a.count, b = i / (a.plane * a.count);
    float v = S_LD(x, (b * a.src_channels + a.src_c0 + c) * a.plane + p);
    int o = (b * a.dst_channels + a.dst_c0 + c) * a.plane + p;
    if (a.accumulate) v += S_LD(y, o);
    S_ST(y, o, v);
}

// nearest-neighbour upsample: y[n,c,i,j] = scale * x[n,c,i/stride,j/stride]; threads = elements of y
KERNEL(S_NAME(upsample))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(ResampleArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int ox = i % a.out_w, oy = (i / a.out_w) % a.out_h, nc = i / (a.out_w * a.out_h);
    S_ST(y, i, a.scale * S_LD(x, (nc * a.in_h + oy / a.stride) * a.in_w + ox / a.stride));
}

// Shortcut, one launch per input (so any number of `from` inputs), in order, each with threads =
// elements of y (a.n) and `in` bound to that input:
//   input 0:      y = w_0 * x                     (in = x, from_sample = sample)
//   input k >= 1: y += w_k * from[k-1] where it exists, by flat per-sample index i < from_sample
// Weights (fp32) are normalised per thread from the raw `weights` (bind any buffer when weights_mode
// = 0; shortcut_weight is in forward_layout.h).
KERNEL(S_NAME(shortcut))(KBUF(S_T, y, 0), KCBUF(S_T, in, 1), KCBUF(float, weights, 2),
                         KARGS(ShortcutArgs, a, 3) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int b = i / a.sample, j = i % a.sample;
    if (j >= a.from_sample) return;
    float w = 1.0f;
    if (a.weights_mode == 1) w = shortcut_weight(weights, 0, 1, a.inputs, a.input, a.norm);
    if (a.weights_mode == 2) w = shortcut_weight(weights, j / a.plane, a.channels, a.inputs, a.input, a.norm);
    float v = S_LD(in, b * a.from_sample + j) * w;
    if (a.input != 0) v += S_LD(y, i);
    S_ST(y, i, v);
}

// maxpool (is_max = 1) and avgpool_local (0): window of size x size from (oy*stride_y - padding/2,
// ox*stride_x - padding/2), cells outside x skipped; average over the cells inside (0 if none).
KFN float S_NAME(pool_window)(KGLOBAL const S_T* x, int i, KARGS_PARAM(PoolArgs) a, int is_max) {
    int ox = i % a.out_w, oy = (i / a.out_w) % a.out_h, nc = i / (a.out_w * a.out_h);
    int off = -a.padding / 2;
    float best = -FLT_MAX_K, sum = 0.0f;
    int count = 0;
    for (int ky = 0; ky < a.size; ++ky)
        for (int kx = 0; kx < a.size; ++kx) {
            int iy = oy * a.stride_y + off + ky, ix = ox * a.stride_x + off + kx;
            if (iy < 0 || iy >= a.in_h || ix < 0 || ix >= a.in_w) continue;
            float v = S_LD(x, (nc * a.in_h + iy) * a.in_w + ix);
            best = v > best ? v : best;
            sum += v;
            ++count;
        }
    return is_max ? best : (count ? sum / (float)count : 0.0f);
}

KERNEL(S_NAME(maxpool))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, S_NAME(pool_window)(x, i, a, 1));
}

KERNEL(S_NAME(avgpool_local))(KBUF(S_T, y, 0), KCBUF(S_T, x, 1), KARGS(PoolArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    S_ST(y, i, S_NAME(pool_window)(x, i, a, 0));
}

// Yolo head: logistic on every entry but w, h (entries 2, 3) unless new_coords, then x, y (entries
// 0, 1) scaled around 0.5 by scale_x_y. The sample's channels are anchors * entries, so the entry is
// (i / plane) % entries for the flat index over the whole batch. x in storage S, y always fp32 (the
// heads are read back, decoded and given to the loss in fp32); y may be x (in place) for fp32.
KERNEL(S_NAME(yolo_activate))(KBUF(float, y, 0), KCBUF(S_T, x, 1), KARGS(YoloActivateArgs, a, 2) KTHREAD_IDS) {
    int i = (int)KGID;
    if (i >= a.n) return;
    int entry = (i / a.plane) % a.entries;
    float v = S_LD(x, i);
    if (!a.new_coords && entry != 2 && entry != 3) v = 1.0f / (1.0f + exp(-v));
    if (entry < 2) v = v * a.scale_x_y - 0.5f * (a.scale_x_y - 1.0f);
    y[i] = v;
}
