// What a Network tells whoever reduces its gradients across ranks (data-parallel training): the
// backward that ends an iteration's accumulation began, layer i's gradients are final, the
// backward ended, and (before the update reads them) that they must be reduced by now.
#pragma once
#include <cstddef>
#include <functional>

namespace dn {

class GradientHook {
public:
    virtual ~GradientHook() = default;
    virtual void backward_begins() = 0;
    virtual void layer_done(int layer) = 0;  // called in backward order (last layer first)
    virtual void backward_ends() = 0;        // layers the backward skipped (stopbackward) count as done
    virtual void finish() = 0;               // blocks until every gradient is the sum over the ranks
    // In place, the sum of n host floats over the ranks (Device::set_choice_agreement); null if none.
    virtual std::function<void(float*, size_t)> sum_over_ranks() { return nullptr; }
};

}  // namespace dn
