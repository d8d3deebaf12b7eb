// Darknet's activation functions: names as written in .cfg files, and the per-element formulas
// (single source: the CPU backend and, later, the GPU kernels include this file).
#pragma once
#include <cmath>
#include <string>

namespace dn {

enum class Activation {
    linear, leaky, relu, relu6, logistic, tanh, swish, mish, hard_mish, elu, selu, gelu,
    // these two mix channels: y = f(x) / sum over channels, applied per pixel
    normalize_channels, normalize_channels_softmax,
};

Activation activation_from_name(const std::string& name, bool* ok);
const char* activation_name(Activation a);

inline bool activation_is_elementwise(Activation a) {
    return a != Activation::normalize_channels && a != Activation::normalize_channels_softmax;
}

// Whether act'(x) can be read off the output y = act(x) alone (act'(y) = act'(x)): linear (1), and
// leaky and relu, whose output has the sign of their input (Darknet's gradient_array reads the
// output too). Training keeps no pre-activation copy for these, and batchnorm fuses them
// (Backend::batchnorm_activate_train / _backward). The others (mish, swish, logistic, ...) need x.
inline bool activation_gradient_from_output(Activation a) {
    return a == Activation::linear || a == Activation::leaky || a == Activation::relu;
}

inline float softplus_darknet(float x, float threshold) {
    if (x > threshold) return x;
    if (x < -threshold) return std::exp(x);
    return std::log(std::exp(x) + 1.0f);
}

inline float activate_scalar(float x, Activation a) {
    switch (a) {
        case Activation::linear: return x;
        case Activation::leaky: return x > 0 ? x : 0.1f * x;
        case Activation::relu: return x > 0 ? x : 0.0f;
        case Activation::relu6: return x < 0 ? 0.0f : (x > 6 ? 6.0f : x);
        case Activation::logistic: return 1.0f / (1.0f + std::exp(-x));
        case Activation::tanh: return (2.0f / (1.0f + std::exp(-2.0f * x)) - 1.0f);
        case Activation::swish: return x / (1.0f + std::exp(-x));
        case Activation::mish: return x * std::tanh(softplus_darknet(x, 20.0f));
        case Activation::hard_mish:
            if (x > 0) return x;
            if (x > -2) return x * x / 2 + x;
            return 0.0f;
        case Activation::elu: return (x >= 0) * x + (x < 0) * (std::exp(x) - 1.0f);
        case Activation::selu: return (x >= 0) * 1.0507f * x + (x < 0) * 1.0507f * 1.6732f * (std::exp(x) - 1.0f);
        case Activation::gelu: return 0.5f * x * (1.0f + std::tanh(0.797885f * x + 0.035677f * x * x * x));
        default: return x;  // channel-mixing activations are not per element
    }
}

}  // namespace dn

namespace dn {

// d act(x) / dx at the pre-activation x (elementwise activations only).
inline float activate_gradient(float x, Activation a) {
    switch (a) {
        case Activation::linear: return 1.0f;
        case Activation::leaky: return x > 0 ? 1.0f : 0.1f;
        case Activation::relu: return x > 0 ? 1.0f : 0.0f;
        case Activation::relu6: return (x > 0 && x < 6) ? 1.0f : 0.0f;
        case Activation::logistic: {
            float s = 1.0f / (1.0f + std::exp(-x));
            return s * (1 - s);
        }
        case Activation::tanh: {
            float t = 2.0f / (1.0f + std::exp(-2.0f * x)) - 1.0f;
            return 1 - t * t;
        }
        case Activation::swish: {
            float s = 1.0f / (1.0f + std::exp(-x));
            return s + x * s * (1 - s);
        }
        case Activation::mish: {
            // d/dx x*tanh(sp(x)) = tanh(sp) + x * (1 - tanh(sp)^2) * sigmoid(x), with Darknet's softplus threshold
            float sp = softplus_darknet(x, 20.0f), t = std::tanh(sp);
            float dsp = x > 20.0f ? 1.0f : 1.0f / (1.0f + std::exp(-x));
            return t + x * (1 - t * t) * dsp;
        }
        case Activation::hard_mish:
            if (x > 0) return 1.0f;
            if (x > -2) return x + 1.0f;
            return 0.0f;
        case Activation::elu: return x >= 0 ? 1.0f : std::exp(x);
        case Activation::selu: return x >= 0 ? 1.0507f : 1.0507f * 1.6732f * std::exp(x);
        case Activation::gelu: {
            // d/dx 0.5 x (1 + tanh u) with 0.5 (1 + tanh u) = s = logistic(2u) and 1 - tanh^2 u = 4 s (1 - s):
            // the same value as the tanh form, without its cancellation for large |x| (where a tanh one
            // ulp off from +-1 would leave an error times x^3; kernels/activation_math.h matches)
            float u = 0.797885f * x + 0.035677f * x * x * x, s = 1.0f / (1.0f + std::exp(-2.0f * u));
            return s + 2.0f * x * s * (1.0f - s) * (0.797885f + 3 * 0.035677f * x * x);
        }
        default: return 1.0f;
    }
}

}  // namespace dn
