// What [convolutional] and [connected] share after their linear map: the indices of their
// batchnorm/bias parameters, and in training batchnorm with batch statistics (and Darknet's
// rolling averages: 99% old, 1% this batch) or a bias, then the activation; and the backward.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "layer.h"

namespace dn {

// Where a layer's biases and batchnorm parameters sit in its `params` (scales < 0: no batchnorm).
struct NormParams {
    int biases = -1, scales = -1, rolling_mean = -1, rolling_variance = -1;
    bool batch_normalize() const { return scales >= 0; }
};

class NormActivationTrainer {
public:
    void forward(Backend& be, Tensor& y, std::vector<Param>& p, const NormParams& k, Activation a) {
        if (k.batch_normalize()) {
            Shape per_channel{1, y.shape().c, 1, 1};
            be.resize(x_norm_, y.shape(), y.dtype(), y.layout());  // the storage type and layout of the activations
            be.resize(mean_, per_channel);
            be.resize(var_, per_channel);
            if (fused(k, a))
                be.batchnorm_activate_train(y, mean_, var_, x_norm_, p[k.scales].value, p[k.biases].value, kEps, a);
            else
                be.batchnorm_train(y, mean_, var_, x_norm_, p[k.scales].value, p[k.biases].value, kEps);
            be.rolling_update(p[k.rolling_mean].value, mean_, 0.99f);
            be.rolling_update(p[k.rolling_variance].value, var_, 0.99f);
        } else {
            be.add_bias(y, p[k.biases].value);
        }
        if (!fused(k, a)) activation_.forward(be, y, a);
    }

    // dy: dL/d(layer output) in, dL/d(linear map output) out; accumulates the bias and scale gradients.
    // y: the layer's output from forward.
    void backward(Backend& be, const Tensor& y, Tensor& dy, std::vector<Param>& p, const NormParams& k, Activation a) {
        if (fused(k, a))
            return be.batchnorm_activate_backward(dy, y, x_norm_, p[k.scales].value, p[k.biases].value, var_, kEps,
                                                  a, p[k.scales].grad, p[k.biases].grad);
        activation_.backward(be, y, dy, a);
        if (k.batch_normalize())
            be.batchnorm_backward(dy, x_norm_, p[k.scales].value, var_, kEps, p[k.scales].grad, p[k.biases].grad);
        else
            be.bias_backward(dy, p[k.biases].grad);
    }

    static constexpr float kEps = 1e-5f;  // Darknet's batchnorm epsilon, inside the sqrt

private:
    // Batchnorm and the activation as one op pair (GpuBackend runs the activation inside batchnorm's
    // passes), for every elementwise activation: those whose gradient needs their input (mish, swish,
    // logistic, ...) have it formed again from x_norm in the backward, so no pre-activation copy is kept.
    // DARKNET_PY_FUSED_BATCHNORM=0 runs batchnorm and the activation as separate ops, the activation
    // keeping its pre-activation copy (TrainingActivation): tests compare the two; read per call, as a
    // switch between steps in one process.
    static bool fused(const NormParams& k, Activation a) {
        if (!k.batch_normalize() || !activation_is_elementwise(a)) return false;
        const char* env = std::getenv("DARKNET_PY_FUSED_BATCHNORM");
        return !(env && std::string(env) == "0");
    }

    Tensor mean_, var_;  // this batch's statistics
    Tensor x_norm_;
    TrainingActivation activation_;
};

}  // namespace dn
