// Per-channel reductions of training: bias gradient and training batchnorm (device kernels only).
// A group reduces one value (or, for batchnorm, one split of a channel: below); the group size is a
// power of two <= 256 (host's choice, e.g. the largest one <= min(256, elements per value)). Each thread sums a strided share in a fixed
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

// Training batchnorm's per-channel reductions run in two steps, so that the big early layers (32
// channels of 208x208 at batch 64) fill the GPU rather than 32 groups: a split of the batch per group
// (`splits` groups per channel; split s covers images [s * per, min(batch, (s + 1) * per)), per =
// ceil(batch / splits), none empty: the host's choice), then one thread per channel combines the
// splits in order. Grid of the partial kernels: channels * splits groups, group g = c * splits + s.

// The first image of split s; split s covers [split_start(a, s), split_start(a, s + 1)).
KFN int split_start(KARGS_PARAM(ChannelSplitArgs) a, int s) {
    int start = s * ((a.batch + a.splits - 1) / a.splits);
    return start < a.batch ? start : a.batch;
}

// Step 1 of the batch statistics: per split, its mean and sum of squared deviations from that mean
// (two passes over the split, the second from cache: no sum-of-squares cancellation).
// partial[2g] = mean, partial[2g + 1] = M2.
KERNEL(batchnorm_partial_stats_f32)(KCBUF(float, y, 0), KBUF(float, partial, 1), KARGS(ChannelSplitArgs, a, 2)
                                        KTHREAD_IDS) {
    KSHARED float shared[256];
    int g = (int)KGROUP, c = g / a.splits;
    int n0 = split_start(a, g % a.splits), n1 = split_start(a, g % a.splits + 1);
    float sum = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) sum += y[(n * a.channels + c) * a.plane + p];
    GROUP_SUM(shared, sum)
    float m = sum / (float)((n1 - n0) * a.plane);
    float sq = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) {
            float d = y[(n * a.channels + c) * a.plane + p] - m;
            sq += d * d;
        }
    GROUP_SUM(shared, sq)
    if (KLID == 0) {
        partial[2 * g] = m;
        partial[2 * g + 1] = sq;
    }
}

// Step 2, one thread per channel: the splits combined in order (Chan et al.'s pairwise update of
// count, mean and M2); mean, and the unbiased variance (divides by count - 1; 0 for a single value),
// as Darknet's variance_cpu. n = channels threads.
KERNEL(batchnorm_combine_stats_f32)(KCBUF(float, partial, 0), KBUF(float, mean, 1), KBUF(float, var, 2),
                                    KARGS(ChannelSplitArgs, a, 3) KTHREAD_IDS) {
    int c = (int)KGID;
    if (c >= a.channels) return;
    float count = 0.0f, m = 0.0f, m2 = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
        int n0 = split_start(a, s), n1 = split_start(a, s + 1);
        float count_s = (float)((n1 - n0) * a.plane), total = count + count_s;
        float ms = partial[2 * (c * a.splits + s)], delta = ms - m;
        m += delta * (count_s / total);
        m2 += partial[2 * (c * a.splits + s) + 1] + delta * delta * (count * count_s / total);
        count = total;
    }
    mean[c] = m;
    var[c] = count > 1.0f ? m2 / (count - 1.0f) : 0.0f;
}

// Elementwise, after batchnorm_combine_stats_f32: x_norm = (y - mean) / sqrt(var + eps), y = x_norm * scale + bias.
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

// First half of batchnorm_backward, step 1 (as the statistics): per split, partial[2g] = sum(dy) and
// partial[2g + 1] = sum(dy * x_norm).
KERNEL(batchnorm_backward_partial_f32)(KCBUF(float, dy, 0), KCBUF(float, x_norm, 1), KBUF(float, partial, 2),
                                       KARGS(ChannelSplitArgs, a, 3) KTHREAD_IDS) {
    KSHARED float shared[256];
    int g = (int)KGROUP, c = g / a.splits;
    int n0 = split_start(a, g % a.splits), n1 = split_start(a, g % a.splits + 1);
    float sdy = 0.0f, sdyx = 0.0f;
    for (int n = n0; n < n1; ++n)
        for (int p = (int)KLID; p < a.plane; p += (int)KGROUP_SIZE) {
            int i = (n * a.channels + c) * a.plane + p;
            sdy += dy[i];
            sdyx += dy[i] * x_norm[i];
        }
    GROUP_SUM(shared, sdy)
    GROUP_SUM(shared, sdyx)
    if (KLID == 0) {
        partial[2 * g] = sdy;
        partial[2 * g + 1] = sdyx;
    }
}

// Step 2, one thread per channel: sums[2c] = sum(dy), sums[2c+1] = sum(dy * x_norm) over the channel
// (written, for batchnorm_backward_data_f32, which needs them after the accumulating outputs were
// added to), and dbias[c] += sum(dy), dscale[c] += sum(dy * x_norm). n = channels threads.
KERNEL(batchnorm_backward_combine_f32)(KCBUF(float, partial, 0), KBUF(float, dscale, 1), KBUF(float, dbias, 2),
                                       KBUF(float, sums, 3), KARGS(ChannelSplitArgs, a, 4) KTHREAD_IDS) {
    int c = (int)KGID;
    if (c >= a.channels) return;
    float sdy = 0.0f, sdyx = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
        sdy += partial[2 * (c * a.splits + s)];
        sdyx += partial[2 * (c * a.splits + s) + 1];
    }
    sums[2 * c] = sdy;
    sums[2 * c + 1] = sdyx;
    dbias[c] += sdy;
    dscale[c] += sdyx;
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
