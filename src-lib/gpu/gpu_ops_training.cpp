// GpuBackend's training ops (backward passes, batchnorm statistics): kernels of kernels/reduce.h,
// kernels/backward*.h.
#include "../kernels/args_training.h"
#include "gpu_backend.h"

namespace dn {

void GpuBackend::bias_backward(const Tensor& dy, Tensor& db) {
    fallback("bias_backward", [&](Backend& cpu, HostStage& h) { cpu.bias_backward(h.in(dy), h.inout(db)); });
}

void GpuBackend::batchnorm_train(Tensor& y, Tensor& mean, Tensor& var, Tensor& x_norm, const Tensor& scale,
                                 const Tensor& bias, float eps) {
    fallback("batchnorm_train", [&](Backend& cpu, HostStage& h) {
        cpu.batchnorm_train(h.inout(y), h.inout(mean), h.inout(var), h.inout(x_norm), h.in(scale), h.in(bias), eps);
    });
}

void GpuBackend::batchnorm_backward(Tensor& dy, const Tensor& x_norm, const Tensor& scale, const Tensor& var, float eps,
                                    Tensor& dscale, Tensor& dbias) {
    fallback("batchnorm_backward", [&](Backend& cpu, HostStage& h) {
        cpu.batchnorm_backward(h.inout(dy), h.in(x_norm), h.in(scale), h.in(var), eps, h.inout(dscale), h.inout(dbias));
    });
}

void GpuBackend::activate_backward(const Tensor& x, Tensor& dy, Activation a) {
    fallback("activate_backward", [&](Backend& cpu, HostStage& h) { cpu.activate_backward(h.in(x), h.inout(dy), a); });
}

void GpuBackend::maxpool_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    fallback("maxpool_backward", [&](Backend& cpu, HostStage& h) { cpu.maxpool_backward(h.in(x), h.in(dy), g, h.inout(dx)); });
}

void GpuBackend::avgpool_local_backward(const Tensor& x, const Tensor& dy, const PoolGeom& g, Tensor& dx) {
    fallback("avgpool_local_backward",
             [&](Backend& cpu, HostStage& h) { cpu.avgpool_local_backward(h.in(x), h.in(dy), g, h.inout(dx)); });
}

void GpuBackend::avgpool_global_backward(const Tensor& dy, Tensor& dx) {
    fallback("avgpool_global_backward", [&](Backend& cpu, HostStage& h) { cpu.avgpool_global_backward(h.in(dy), h.inout(dx)); });
}

void GpuBackend::maxpool_depth_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
    fallback("maxpool_depth_backward",
             [&](Backend& cpu, HostStage& h) { cpu.maxpool_depth_backward(h.in(x), h.in(dy), h.inout(dx)); });
}

void GpuBackend::shortcut_backward(const Tensor& x, const std::vector<const Tensor*>& from, const Tensor* weights,
                                   ShortcutWeights wt, ShortcutNorm norm, const Tensor& dy, Tensor& dx,
                                   const std::vector<Tensor*>& dfrom, Tensor* dweights) {
    fallback("shortcut_backward", [&](Backend& cpu, HostStage& h) {
        std::vector<const Tensor*> hf;
        std::vector<Tensor*> hdf;
        for (const Tensor* f : from) hf.push_back(h.in(f));
        for (Tensor* d : dfrom) hdf.push_back(h.inout(d));
        cpu.shortcut_backward(h.in(x), hf, h.in(weights), wt, norm, h.in(dy), h.inout(dx), hdf, h.inout(dweights));
    });
}

void GpuBackend::upsample_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    fallback("upsample_backward", [&](Backend& cpu, HostStage& h) { cpu.upsample_backward(h.in(dy), stride, scale, h.inout(dx)); });
}

void GpuBackend::downsample_sum_backward(const Tensor& dy, int stride, float scale, Tensor& dx) {
    fallback("downsample_sum_backward",
             [&](Backend& cpu, HostStage& h) { cpu.downsample_sum_backward(h.in(dy), stride, scale, h.inout(dx)); });
}

void GpuBackend::reorg_backward(const Tensor& dy, int w, int h_, int c, int stride, bool forward, Tensor& dx) {
    fallback("reorg_backward",
             [&](Backend& cpu, HostStage& h) { cpu.reorg_backward(h.in(dy), w, h_, c, stride, forward, h.inout(dx)); });
}

void GpuBackend::scale_channels_backward(const Tensor& s, const Tensor& from, bool scale_wh, const Tensor& dy, Tensor& ds,
                                         Tensor& dfrom) {
    fallback("scale_channels_backward", [&](Backend& cpu, HostStage& h) {
        cpu.scale_channels_backward(h.in(s), h.in(from), scale_wh, h.in(dy), h.inout(ds), h.inout(dfrom));
    });
}

void GpuBackend::mul_backward(const Tensor& a, const Tensor& b, const Tensor& dy, Tensor& da, Tensor& db) {
    fallback("mul_backward",
             [&](Backend& cpu, HostStage& h) { cpu.mul_backward(h.in(a), h.in(b), h.in(dy), h.inout(da), h.inout(db)); });
}

void GpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, int groups, float temperature, Tensor& dx) {
    fallback("softmax_backward",
             [&](Backend& cpu, HostStage& h) { cpu.softmax_backward(h.in(y), h.in(dy), groups, temperature, h.inout(dx)); });
}

}  // namespace dn
