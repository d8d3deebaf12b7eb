// The group-wide sum every reduction kernel uses (reduce.h, backward.h, forward_layout.h, the loss).
#pragma once
#include "compat_cpu.h"

// v becomes the sum of every thread's v in the group, added as a fixed tree through the threadgroup
// array `partial` (deterministic). Every thread of the group must reach it (it holds barriers); it
// ends with one, so `partial` may be reused right after. (A macro: threadgroup arrays cannot be
// passed to helper functions portably.)
#define GROUP_SUM(partial, v)                                             \
    partial[KLID] = v;                                                    \
    KBARRIER();                                                           \
    for (uint half_ = KGROUP_SIZE / 2; half_ > 0; half_ >>= 1) {          \
        if (KLID < half_) partial[KLID] += partial[KLID + half_];         \
        KBARRIER();                                                       \
    }                                                                     \
    v = partial[0];                                                       \
    KBARRIER();
