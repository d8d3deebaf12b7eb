// Per-channel reductions of training: bias gradient and training batchnorm (device kernels only).
// The kernels that read activations (bias_backward, batchnorm's partial sums, normalize and data
// gradient) are in storage_training.h, one per storage type; the fp32-only combining steps are here.
// A group reduces one value (or, for batchnorm, one split of a channel: below); the group size is a
// power of two <= 256 (host's choice, e.g. the largest one <= min(256, elements per value)). Each thread sums a strided share in a fixed
// order, then the group adds the partial sums as a fixed tree: the result does not depend on timing.
#pragma once
#include "args_training.h"
#include "group_sum.h"

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

// Step 2 (step 1: batchnorm_partial_stats_<type>), one thread per channel: the splits combined in order (Chan et al.'s pairwise update of
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

// Step 2 of batchnorm_backward (step 1: batchnorm_backward_partial_<type>), one thread per channel: sums[2c] = sum(dy), sums[2c+1] = sum(dy * x_norm) over the channel
// (written, for batchnorm_backward_data_<type>, which needs them after the accumulating outputs were
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

// The same two steps 2 over many splits (the NHWC kernels split each channel's pixels in up to 1024):
// one group per channel, thread t takes splits t, t + group size, ... in order, then the group combines
// the threads' results as a fixed tree (the serial combines above took 80 us a call over 1024 splits on
// an H100). Grid: channels groups.
KERNEL(batchnorm_combine_stats_tree_f32)(KCBUF(float, partial, 0), KBUF(float, mean, 1), KBUF(float, var, 2),
                                         KARGS(ChannelSplitArgs, a, 3) KTHREAD_IDS) {
    KSHARED float counts[256];
    KSHARED float means[256];
    KSHARED float m2s[256];
    int c = (int)KGROUP;
    float count = 0.0f, m = 0.0f, m2 = 0.0f;
    for (int s = (int)KLID; s < a.splits; s += (int)KGROUP_SIZE) {
        int n0 = split_start(a, s), n1 = split_start(a, s + 1);
        float count_s = (float)((n1 - n0) * a.plane), total = count + count_s;
        float delta = partial[2 * (c * a.splits + s)] - m;
        m += delta * (count_s / total);
        m2 += partial[2 * (c * a.splits + s) + 1] + delta * delta * (count * count_s / total);
        count = total;
    }
    counts[KLID] = count;
    means[KLID] = m;
    m2s[KLID] = m2;
    KBARRIER();
    for (uint half_ = KGROUP_SIZE / 2; half_ > 0; half_ >>= 1) {
        if (KLID < half_ && counts[KLID + half_] > 0.0f) {  // Chan's update of (count, mean, M2) pairs
            float ca = counts[KLID], cb = counts[KLID + half_], total = ca + cb;
            float delta = means[KLID + half_] - means[KLID];
            means[KLID] += delta * (cb / total);
            m2s[KLID] += m2s[KLID + half_] + delta * delta * (ca * cb / total);
            counts[KLID] = total;
        }
        KBARRIER();
    }
    if (KLID == 0) {
        mean[c] = means[0];
        var[c] = counts[0] > 1.0f ? m2s[0] / (counts[0] - 1.0f) : 0.0f;
    }
}

KERNEL(batchnorm_backward_combine_tree_f32)(KCBUF(float, partial, 0), KBUF(float, dscale, 1), KBUF(float, dbias, 2),
                                            KBUF(float, sums, 3), KARGS(ChannelSplitArgs, a, 4) KTHREAD_IDS) {
    KSHARED float shared[256];
    int c = (int)KGROUP;
    float sdy = 0.0f, sdyx = 0.0f;
    for (int s = (int)KLID; s < a.splits; s += (int)KGROUP_SIZE) {
        sdy += partial[2 * (c * a.splits + s)];
        sdyx += partial[2 * (c * a.splits + s) + 1];
    }
    GROUP_SUM(shared, sdy)
    GROUP_SUM(shared, sdyx)
    if (KLID == 0) {
        sums[2 * c] = sdy;
        sums[2 * c + 1] = sdyx;
        dbias[c] += sdy;
        dscale[c] += sdyx;
    }
}
