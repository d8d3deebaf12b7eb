// Darknet's optimizer steps for one parameter i (single source for every backend).
// `grad` holds dL/dw summed over the batch; Darknet keeps the negated sum in `*_updates` instead.
#pragma once
#include "compat_cpu.h"

namespace dn {

// SGD with momentum and weight decay as Darknet's update_*_layer applies it.
KFN void sgd_step(uint i, KGLOBAL float* w, KGLOBAL float* grad, KGLOBAL float* m, float lr, float momentum,
                  float decay, int batch) {
    float upd = m[i] - grad[i] - decay * batch * w[i];
    w[i] += lr / batch * upd;
    m[i] = momentum * upd;
    grad[i] = 0.0f;
}

// Adam as Darknet's adam_update_gpu: decay folded into the update, bias-corrected moments.
KFN void adam_step(uint i, KGLOBAL float* w, KGLOBAL float* grad, KGLOBAL float* m, KGLOBAL float* v, float lr,
                   float b1, float b2, float eps, float decay, int batch, int t) {
    float d = -grad[i] - decay * batch * w[i];
    m[i] = b1 * m[i] + (1.0f - b1) * d;
    v[i] = b2 * v[i] + (1.0f - b2) * d * d;
    float mhat = m[i] / (1.0f - powf(b1, (float)t));
    float vhat = v[i] / (1.0f - powf(b2, (float)t));
    w[i] += lr * mhat / (sqrtf(fabsf(vhat)) + eps);
    grad[i] = 0.0f;
}

}  // namespace dn
