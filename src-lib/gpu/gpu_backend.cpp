#include "gpu_backend.h"

#include <cstdio>

#include "../errors.h"

namespace dn {

Tensor& HostStage::copy_of(const Tensor& t) {
    auto& copy = host_[t.buffer().get()];
    if (!copy) copy = std::make_unique<Tensor>(to_host(t));
    return *copy;
}

Tensor& HostStage::inout(Tensor& t) {
    if (!t.on_host()) outputs_[t.buffer().get()] = &t;
    return copy_of(t);
}

void HostStage::upload_outputs() {
    for (auto& [buffer, device_tensor] : outputs_) copy_from_host(host_[buffer]->data(), *device_tensor);
}

GpuBackend::GpuBackend(std::shared_ptr<Device> device) : device_(std::move(device)), name_(device_->info().id) {}

KernelArg GpuBackend::any_buf(const Tensor& t) const {
    // (an NHWC tensor of one channel or of 1x1 planes is ordered as NCHW: channel_view, flat matrices)
    if (t.layout() == Layout::nhwc && t.shape().c > 1 && t.shape().plane() > 1)
        throw DarknetError("an NHWC " + t.shape().str() + " tensor was passed to an op that runs on NCHW tensors only on " +
                           name_ + " (the ops with an NHWC path: src-lib/gpu/PRECISION.md, \"Layout\")");
    return flat_buf(t);
}

KernelArg GpuBackend::flat_buf(const Tensor& t) const {
    if (t.device() != device_.get())
        throw DarknetError("a " + t.shape().str() + " tensor on " + (t.on_host() ? "the host" : t.device()->info().id) +
                           " was passed to an op on " + name_ + " (move it with Backend::adopt first)");
    return KernelArg::buf(t.memory());
}

KernelArg GpuBackend::buf(const Tensor& t) const {
    if (t.dtype() != DType::f32)
        throw DarknetError(std::string("a ") + dtype_name(t.dtype()) + " " + t.shape().str() +
                           " tensor was passed to an op that runs in fp32 only on " + name_ +
                           " (the ops that take fp16 / bf16: src-lib/gpu/PRECISION.md)");
    return any_buf(t);
}

uint32_t GpuBackend::group_size(const char* kernel) {
    auto it = group_sizes_.find(kernel);
    if (it != group_sizes_.end()) return it->second;
    uint32_t g = std::min<uint32_t>(group_limit_, device_->max_group_size(kernel));
    return group_sizes_[kernel] = g ? g : 1;
}

uint32_t GpuBackend::reduction_group_size(const char* kernel) {
    uint32_t g = 1;
    while (g * 2 <= group_size(kernel)) g *= 2;  // the reductions halve their active threads each step
    return g;
}

const std::map<std::string, int>* GpuBackend::fallback_counts() const {
    counts_ = fallbacks_;
    for (const auto& [path, n] : device_->fast_path_failures()) counts_[path + " failed"] = n;
    for (const auto& [path, n] : device_->fast_path_declines()) counts_[path + " declined"] = n;
    return &counts_;
}

void GpuBackend::fallback(const char* name, const std::function<void(Backend&, HostStage&)>& op) {
    if (!cpu_) cpu_ = make_cpu_backend();
    if (fallbacks_[name]++ == 0)
        std::fprintf(stderr, "darknet_py: %s runs %s on the CPU (no kernel for it here): its tensors are copied\n",
                     name_.c_str(), name);
    HostStage h;
    op(*cpu_, h);
    h.upload_outputs();
}

Tensor& GpuBackend::scratch(int slot, size_t n, DType dtype, Layout layout) {
    Tensor& t = scratch_[{slot, dtype, layout}];
    if (t.empty() || t.buffer()->count() < n) t = alloc(Shape{1, 1, 1, (int)n}, dtype, layout);
    return t;
}

}  // namespace dn
