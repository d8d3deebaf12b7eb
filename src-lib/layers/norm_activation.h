// What [convolutional] and [connected] share after their linear map, in training: batchnorm with
// batch statistics (and Darknet's rolling averages: 99% old, 1% this batch) or a bias, then the
// activation; and the matching backward.
#pragma once
#include <vector>

#include "layer.h"

namespace dn {

class NormActivationTrainer {
public:
    void forward(Backend& be, Tensor& y, bool batch_normalize, Activation a, const Tensor& scales,
                 const Tensor& biases, Tensor& rolling_mean, Tensor& rolling_variance) {
        if (batch_normalize) {
            int c = y.shape().c;
            x_norm_.resize(y.shape());
            mean_.resize(c);
            var_.resize(c);
            be.batchnorm_train(y, mean_.data(), var_.data(), x_norm_, scales.data(), biases.data(), kEps);
            for (int k = 0; k < c; ++k) {
                rolling_mean[k] = 0.99f * rolling_mean[k] + 0.01f * mean_[k];
                rolling_variance[k] = 0.99f * rolling_variance[k] + 0.01f * var_[k];
            }
        } else {
            be.add_bias(y, biases.data());
        }
        keep_pre_activation(be, y, a, pre_activation_);
    }

    // dy: dL/d(layer output) in, dL/d(linear map output) out; accumulates the bias and scale gradients.
    void backward(Backend& be, Tensor& dy, bool batch_normalize, Activation a, const Tensor& scales,
                  Tensor& bias_grad, Tensor& scale_grad) {
        if (a != Activation::linear) be.activate_backward(pre_activation_, dy, a);
        if (batch_normalize)
            be.batchnorm_backward(dy, x_norm_, scales.data(), var_.data(), kEps, scale_grad.data(), bias_grad.data());
        else
            be.bias_backward(dy, bias_grad.data());
    }

    static constexpr float kEps = 1e-5f;  // Darknet's batchnorm epsilon, inside the sqrt

private:
    std::vector<float> mean_, var_;  // this batch's statistics
    Tensor x_norm_, pre_activation_;
};

}  // namespace dn
