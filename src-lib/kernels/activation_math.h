// Darknet's elementwise activations and their gradients for kernel text (OpenCL C, CUDA, MSL, C++):
// the same float formulas as activate_scalar / activate_gradient in activation.h, keyed by int codes.
#pragma once
#include "compat_cpu.h"
KNAMESPACE_BEGIN

// The integer values of enum class Activation (activation.h); kernel text cannot use enum class.
enum {
    ACT_LINEAR = 0, ACT_LEAKY = 1, ACT_RELU = 2, ACT_RELU6 = 3, ACT_LOGISTIC = 4, ACT_TANH = 5,
    ACT_SWISH = 6, ACT_MISH = 7, ACT_HARD_MISH = 8, ACT_ELU = 9, ACT_SELU = 10, ACT_GELU = 11,
    ACT_NORMALIZE_CHANNELS = 12, ACT_NORMALIZE_CHANNELS_SOFTMAX = 13
};

// exp(x) and a / b as written (approx = 0), or the device's fast approximations (approx = 1: KFAST_EXP,
// KFAST_DIV, a few ulp of float). The half storage types' kernels ask for them: their results are
// rounded to 8 or 11 bits, far above those ulps, and the accurate forms' arithmetic cost yolov4's mish
// passes time (benchmarks/RESULTS_GPU.md). fp32 storage keeps the accurate forms: its results stay
// those of the CPU backends.
KFN float act_exp(float x, int approx) { return approx ? KFAST_EXP(x) : exp(x); }
KFN float act_div(float a, float b, int approx) { return approx ? KFAST_DIV(a, b) : a / b; }

// activate_scalar; the channel-mixing codes (12, 13) return x, as there
KFN float act_forward(float x, int a, int approx) {
    switch (a) {
        case ACT_LEAKY: return x > 0 ? x : 0.1f * x;
        case ACT_RELU: return x > 0 ? x : 0.0f;
        case ACT_RELU6: return x < 0 ? 0.0f : (x > 6 ? 6.0f : x);
        case ACT_LOGISTIC: return act_div(1.0f, 1.0f + act_exp(-x, approx), approx);
        case ACT_TANH: return (2.0f / (1.0f + exp(-2.0f * x)) - 1.0f);
        case ACT_SWISH: return act_div(x, 1.0f + act_exp(-x, approx), approx);
        case ACT_MISH: {
            // x * tanh(softplus(x)) with tanh(log(1 + e)) = n / (n + 2), n = e (e + 2): one exp where
            // Darknet's form takes three special functions, which left the mish layers' passes bound by
            // arithmetic on GPUs (the CPU backend's vector form is this one too, cpu/simd.h). Darknet's
            // softplus is x above 20, where tanh is 1 in float.
            // No early return, and the formula's value kept live on both sides of the select (0 * r, r
            // finite there): the compiler then computes it unguarded instead of branching around it per
            // element, and a thread's elements overlap (ACT_SPECIALIZED). xs: x clamped, NaN kept.
            float xs = x > 20.0f ? 20.0f : x, e = act_exp(xs, approx), n = e * (e + 2.0f);
            float r = act_div(xs * n, n + 2.0f, approx);
            return x > 20.0f ? x + 0.0f * r : r;
        }
        case ACT_HARD_MISH:
            if (x > 0) return x;
            if (x > -2) return x * x / 2 + x;
            return 0.0f;
        // (x >= 0) * ... keeps Darknet's form (and its NaN for x > ~88, where exp overflows)
        case ACT_ELU: return (x >= 0) * x + (x < 0) * (exp(x) - 1.0f);
        case ACT_SELU: return (x >= 0) * 1.0507f * x + (x < 0) * 1.0507f * 1.6732f * (exp(x) - 1.0f);
        case ACT_GELU: return 0.5f * x * (1.0f + tanh(0.797885f * x + 0.035677f * x * x * x));
        default: return x;  // linear, and the channel-mixing activations
    }
}

// activation_gradient_from_output (activation.h): act'(y) = act'(x) for these, y = act(x)
KFN int act_gradient_from_output(int a) { return a == ACT_LINEAR || a == ACT_LEAKY || a == ACT_RELU; }

// activate_gradient: d act(x) / dx at the pre-activation x; 1 for the channel-mixing codes
KFN float act_gradient(float x, int a, int approx) {
    switch (a) {
        case ACT_LEAKY: return x > 0 ? 1.0f : 0.1f;
        case ACT_RELU: return x > 0 ? 1.0f : 0.0f;
        case ACT_RELU6: return (x > 0 && x < 6) ? 1.0f : 0.0f;
        case ACT_LOGISTIC: {
            float s = act_div(1.0f, 1.0f + act_exp(-x, approx), approx);
            return s * (1 - s);
        }
        case ACT_TANH: {
            float t = 2.0f / (1.0f + exp(-2.0f * x)) - 1.0f;
            return 1 - t * t;
        }
        case ACT_SWISH: {
            float s = act_div(1.0f, 1.0f + act_exp(-x, approx), approx);
            return s + x * s * (1 - s);
        }
        case ACT_MISH: {
            // tanh(sp) + x (1 - tanh(sp)^2) sigmoid(x), sp = softplus(x), from one exp as act_forward:
            // tanh(sp) = n / (n + 2), 1 - tanh(sp)^2 = 4 (n + 1) / (n + 2)^2 (no cancellation near 1),
            // sigmoid(x) = e / (1 + e). Above Darknet's threshold (20) tanh(sp) is 1 in float: 1.
            float xs = x > 20.0f ? 20.0f : x, e = act_exp(xs, approx), n = e * (e + 2.0f), d = n + 2.0f;  // as above
            float g = act_div(n, d, approx) + xs * act_div(4.0f * (n + 1.0f), d * d, approx) * act_div(e, 1.0f + e, approx);
            return x > 20.0f ? 1.0f + 0.0f * g : g;
        }
        case ACT_HARD_MISH:
            if (x > 0) return 1.0f;
            if (x > -2) return x + 1.0f;
            return 0.0f;
        case ACT_ELU: return x >= 0 ? 1.0f : exp(x);
        case ACT_SELU: return x >= 0 ? 1.0507f : 1.0507f * 1.6732f * exp(x);
        case ACT_GELU: {  // the logistic form of activation.h (no cancellation for large |x|)
            float u = 0.797885f * x + 0.035677f * x * x * x, s = 1.0f / (1.0f + exp(-2.0f * u));
            return s + 2.0f * x * s * (1.0f - s) * (0.797885f + 3 * 0.035677f * x * x);
        }
        default: return 1.0f;  // linear, and the channel-mixing activations
    }
}

// ACT_SPECIALIZED(act, body...): body with `act_` bound to act, written once per activation the shipped
// cfgs use with act_ a constant (so act_forward / act_gradient inline to that activation alone) and once
// more for the rest. For the kernels that take several elements a thread (the NHWC passes): with the
// switch per element their elements' arithmetic sat in blocks of their own, one after another, and the
// activations' exp and reciprocal latencies were not overlapped (benchmarks/RESULTS_GPU.md).
#define ACT_CASE_(code, ...) \
    case code: {             \
        const int act_ = code; \
        __VA_ARGS__          \
    } break;
#define ACT_SPECIALIZED(act, ...)                 \
    switch (act) {                                \
        ACT_CASE_(ACT_LINEAR, __VA_ARGS__)        \
        ACT_CASE_(ACT_LEAKY, __VA_ARGS__)         \
        ACT_CASE_(ACT_RELU, __VA_ARGS__)          \
        ACT_CASE_(ACT_LOGISTIC, __VA_ARGS__)      \
        ACT_CASE_(ACT_SWISH, __VA_ARGS__)         \
        ACT_CASE_(ACT_MISH, __VA_ARGS__)          \
        default: {                                \
            const int act_ = (act);               \
            __VA_ARGS__                           \
        }                                         \
    }

KNAMESPACE_END
