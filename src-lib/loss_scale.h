// Dynamic loss scaling for fp16 training (src-lib/gpu/PRECISION.md). fp16 holds magnitudes from
// 6e-8 (subnormal) to 65504: many of a detector's activation gradients are smaller than its smallest
// values and would become zero. So the backward starts from the loss's gradient times `scale` (the
// [yolo] heads multiply their fp32 deltas by it on the way into the half deltas below them), and
// Network::update divides the fp32 parameter gradients by it again. A step whose gradients hold an
// inf or NaN (a half value overflowed) is skipped and the scale halves; after `growth_interval`
// clean steps in a row it doubles (PyTorch's GradScaler policy and defaults). bf16 has fp32's range
// and fp32 needs nothing: there the scale stays 1 and nothing is checked.
#pragma once
#include <algorithm>

#include "errors.h"
#include "tensor.h"

namespace dn {

struct LossScaler {
    static constexpr float kInitial = 65536.0f;  // 2^16; the first steps find the level by halving
    static constexpr float kMin = 1.0f / 65536, kMax = 16777216.0f;

    bool dynamic = false;  // fp16 training: scale and check; otherwise scale = 1
    float scale = 1.0f;
    int growth_interval = 2000;  // clean steps before the scale doubles
    int clean_steps = 0;
    long long skipped_steps = 0;  // steps skipped for overflow since the precision was set

    // The policy of a network in storage type t (set_precision).
    void reset(DType t) {
        dynamic = t == DType::f16;
        scale = dynamic ? kInitial : 1.0f;
        clean_steps = 0;
        skipped_steps = 0;
    }
    // After a step's gradients were checked: whether the step applies, and the scale for the next one.
    // `ran_at` is the scale the step's backward ran at. The host learns a step's check one step late
    // (Network::queue_update), so the step after an overflowing one was queued at the same, old
    // scale: it most likely overflows too and is skipped as well. Its overflow says nothing of the
    // halved scale, so an overflow sets the scale to at most half the one it ran at (halving again
    // would leave the scale a level lower than the synchronous check finds; in order, the two agree).
    // Gradients that overflow even at the smallest scale are not finite at all: training diverged.
    bool after_check(bool overflowed, float ran_at) {
        if (overflowed && ran_at <= kMin)
            throw DarknetError("fp16 training diverged: the gradients overflow even at the smallest loss scale "
                               "(2^-16); lower learning_rate or raise burn_in in the cfg, or train in bf16");
        if (overflowed) {
            scale = std::min(scale, std::max(ran_at * 0.5f, kMin));
            clean_steps = 0;
            ++skipped_steps;
            return false;
        }
        if (++clean_steps >= growth_interval) {
            scale = std::min(scale * 2.0f, kMax);
            clean_steps = 0;
        }
        return true;
    }
};

// What the host learns of one queued update (Network::queue_update) once its check is read.
struct UpdateCheck {
    bool learnt = false;      // the check was read (Network::learn_update_checks); the rest is final then
    bool applied = true;      // false: fp16 gradients overflowed and the device skipped the step
    float scale = 1.0f;       // the loss scale the step's backward ran at
    float next_scale = 1.0f;  // the host's loss scale once this check was learnt
};

}  // namespace dn
