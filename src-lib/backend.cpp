// The Backend's default compositions (backend.h) that need more than a call of other ops.
#include "backend.h"

namespace dn {

void Backend::batchnorm_activate_backward(Tensor& dy, const Tensor& y, const Tensor& x_norm, const Tensor& scale,
                                          const Tensor& bias, const Tensor& var, float eps, Activation a,
                                          Tensor& dscale, Tensor& dbias) {
    require_elementwise("batchnorm_activate_backward", a);
    if (activation_gradient_from_output(a)) {
        if (a != Activation::linear) activate_backward(y, dy, a);
    } else {
        // the pre-activation, as batchnorm_train formed it: x_norm * scale + bias per channel
        Tensor pre = alloc(x_norm.shape());
        const Shape& s = x_norm.shape();
        const float *xn = x_norm.data(), *k = scale.data(), *b = bias.data();
        float* v = pre.data();
        size_t plane = s.plane();
        for (size_t i = 0, n = x_norm.size(); i < n; ++i) {
            size_t c = (i / plane) % (size_t)s.c;
            v[i] = xn[i] * k[c] + b[c];
        }
        activate_backward(pre, dy, a);
    }
    batchnorm_backward(dy, x_norm, scale, var, eps, dscale, dbias);
}

}  // namespace dn
