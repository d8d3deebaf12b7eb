// Per-channel reductions of training: bias gradient and training batchnorm (device kernels only).
// Reductions run one group per reduced value; the group size is a power of two <= 256 (host's choice,
// e.g. the largest one <= min(256, elements per value)). Each thread sums a strided share in a fixed
// order, then the group adds the partial sums as a fixed tree: the result does not depend on timing.
#pragma once
#include "args_training.h"
#include "group_sum.h"


// db[c] += sum of dy[:, c, :, :]. Grid: `channels` groups.
KERNEL(bias_backward_f32)(KCBUF(float, dy, 0), KBUF(float, db, 1), KARGS(BiasBackwardArgs, a, 2) KTHREAD_IDS) {
    KSHARED float partial[256];
    int c = (int)KGROUP, count = a.batch * a.plane;
    float sum = 0.0f;
    for (int e = (int)KLID; e < count; e += (int)KGROUP_SIZE)
        sum += dy[((e / a.plane) * a.channels + c) * a.plane + e % a.plane];
    GROUP_SUM(partial, sum)
    if (KLID == 0) db[c] += sum;
}

// Batch statistics of channel c (one group per channel): mean, and the unbiased variance (divides by
// count - 1; 0 for a single value), as Darknet's variance_cpu. Two passes over the data (mean first)
// rather than sum and sum of squares, which cancels badly in float. Grid: `channels` groups.
KERNEL(batchnorm_stats_f32)(KCBUF(float, y, 0), KBUF(float, mean, 1), KBUF(float, var, 2),
                            KARGS(BatchnormTrainArgs, a, 3) KTHREAD_IDS) {
    KSHARED float partial[256];
    int c = (int)KGROUP, count = a.batch * a.plane;
    float sum = 0.0f;
    for (int e = (int)KLID; e < count; e += (int)KGROUP_SIZE)
        sum += y[((e / a.plane) * a.channels + c) * a.plane + e % a.plane];
    GROUP_SUM(partial, sum)
    float m = sum / (float)count;
    float sq = 0.0f;
    for (int e = (int)KLID; e < count; e += (int)KGROUP_SIZE) {
        float d = y[((e / a.plane) * a.channels + c) * a.plane + e % a.plane] - m;
        sq += d * d;
    }
    GROUP_SUM(partial, sq)
    if (KLID == 0) {
        mean[c] = m;
        var[c] = count > 1 ? sq / (float)(count - 1) : 0.0f;
    }
}

// Elementwise, after batchnorm_stats_f32: x_norm = (y - mean) / sqrt(var + eps), y = x_norm * scale + bias.
// n = batch * channels * plane threads.
KERNEL(batchnorm_normalize_f32)(KBUF(float, y, 0), KBUF(float, x_norm, 1), KCBUF(float, mean, 2),
                                KCBUF(float, var, 3), KCBUF(float, scale, 4), KCBUF(float, bias, 5),
                                KARGS(BatchnormTrainArgs, a, 6) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int c = (int)((i / (uint)a.plane) % (uint)a.channels);
    float xn = (y[i] - mean[c]) / sqrt(var[c] + a.eps);
    x_norm[i] = xn;
    y[i] = xn * scale[c] + bias[c];
}

// First half of batchnorm_backward, one group per channel: sums[2c] = sum(dy), sums[2c+1] =
// sum(dy * x_norm) over the channel (written, for batchnorm_backward_data_f32, which needs them
// after the accumulating outputs were added to), and dbias[c] += sum(dy), dscale[c] += sum(dy * x_norm).
// Grid: `channels` groups; sums holds 2 * channels floats.
KERNEL(batchnorm_backward_reduce_f32)(KCBUF(float, dy, 0), KCBUF(float, x_norm, 1), KBUF(float, dscale, 2),
                                      KBUF(float, dbias, 3), KBUF(float, sums, 4),
                                      KARGS(BatchnormTrainArgs, a, 5) KTHREAD_IDS) {
    KSHARED float partial[256];
    int c = (int)KGROUP, count = a.batch * a.plane;
    float sdy = 0.0f, sdyx = 0.0f;
    for (int e = (int)KLID; e < count; e += (int)KGROUP_SIZE) {
        int i = ((e / a.plane) * a.channels + c) * a.plane + e % a.plane;
        sdy += dy[i];
        sdyx += dy[i] * x_norm[i];
    }
    GROUP_SUM(partial, sdy)
    GROUP_SUM(partial, sdyx)
    if (KLID == 0) {
        sums[2 * c] = sdy;
        sums[2 * c + 1] = sdyx;
        dbias[c] += sdy;
        dscale[c] += sdyx;
    }
}

// Second half, elementwise: dy becomes dL/d(batchnorm input). With x_norm = (x - mean) * inv and the
// unbiased variance (N - 1), g = dy * scale: dx = inv * (g - mean(g) - x_norm * sum(g * x_norm) / (N - 1)).
// n = batch * channels * plane threads.
KERNEL(batchnorm_backward_data_f32)(KBUF(float, dy, 0), KCBUF(float, x_norm, 1), KCBUF(float, scale, 2),
                                    KCBUF(float, var, 3), KCBUF(float, sums, 4),
                                    KARGS(BatchnormTrainArgs, a, 5) KTHREAD_IDS) {
    uint i = KGID;
    if (i >= (uint)a.n) return;
    int c = (int)((i / (uint)a.plane) % (uint)a.channels);
    float count = (float)a.batch * (float)a.plane;
    float inv = 1.0f / sqrt(var[c] + a.eps);
    float gmean = scale[c] * sums[2 * c] / count;
    float gx = scale[c] * sums[2 * c + 1] / (count > 1.0f ? count - 1.0f : 1.0f);
    dy[i] = inv * (scale[c] * dy[i] - gmean - x_norm[i] * gx);
}
