// Darknet's shortcut weight normalisation (shortcut_multilayer_cpu), computed once per weight
// group for the CPU forward and backward: one group for per_feature, one per channel for
// per_channel weights.
#pragma once
#include "isa.h"
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

#include "../backend.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

// w[g * nin + k] = normalised weight of input k in group g (1 without weights); sums[g] = the
// group's denominator (eps 0.0001 plus the relu'd or exp'd weights).
inline void normalize_shortcut_weights(const float* weights, ShortcutWeights wt, ShortcutNorm norm, int nin,
                                       int groups, std::vector<float>& w, std::vector<float>& sums) {
    w.assign((size_t)nin * groups, 1.0f);
    sums.assign(groups, 1.0f);
    if (wt == ShortcutWeights::none) return;
    for (int g = 0; g < groups; ++g) {
        float mx = -FLT_MAX, sum = 0.0001f;
        for (int k = 0; k < nin; ++k) mx = std::max(mx, weights[g + k * groups]);
        for (int k = 0; k < nin; ++k) {
            float v = weights[g + k * groups];
            sum += norm == ShortcutNorm::relu ? std::max(v, 0.0f) : std::exp(v - mx);
        }
        sums[g] = sum;
        for (int k = 0; k < nin; ++k) {
            float v = weights[g + k * groups];
            if (norm == ShortcutNorm::relu) v = std::max(v, 0.0f) / sum;
            else if (norm == ShortcutNorm::softmax) v = std::exp(v - mx) / sum;
            w[(size_t)g * nin + k] = v;
        }
    }
}

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
