// The CPU backend's training ops (backward passes and optimizer steps), as free functions that
// CpuBackend forwards to. Same meaning as the Backend methods of the same name (backend.h).
#pragma once
#include "isa.h"
#include <vector>

#include "../backend.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeom& g, Tensor& dw, std::vector<float>& ws);
void conv2d_backward_data(const Tensor& dy, const Tensor& w, const ConvGeom& g, Tensor& dx, std::vector<float>& ws);
void bias_backward(const Tensor& dy, float* db);
void batchnorm_train(Tensor& y, float* mean, float* var, Tensor& x_norm, const float* scale, const float* bias, float eps);
void batchnorm_backward(Tensor& dy, const Tensor& x_norm, const float* scale, const float* var, float eps, float* dscale,
                        float* dbias);
void activate_backward(const Tensor& x, Tensor& dy, Activation a);
void pool_backward(bool max, const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx);
void avgpool_global_backward(const Tensor& dy, Tensor& dx);
void maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void add_channels(const Tensor& x, int src_c0, Tensor& y, int dst_c0, int count);
void shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const float* weights,
                       ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                       const std::vector<Tensor*>& dfrom, float* dweights);
void upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx);
void downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx);
void reorg_backward(const Tensor& dy, int w, int h, int c, int stride, bool forward, Tensor& dx);
void scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                             Tensor& dfrom);
void mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db);
void softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx);
// skip: null, or the optimizers' skip flag (backend.h): set, the step only zeroes grad.
void sgd_update(float* w, float* grad, float* m, size_t n, float lr, float momentum, float decay, int batch,
                const float* skip);
void adam_update(float* w, float* grad, float* m, float* v, size_t n, float lr, float b1, float b2, float eps,
                 float decay, int batch, int t, const float* skip);

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
