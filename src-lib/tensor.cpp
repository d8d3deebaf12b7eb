#include "tensor.h"

#include <cstring>

#include "errors.h"
#include "gpu/device.h"

namespace dn {

Buffer::Buffer(std::shared_ptr<Device> device, size_t count) : count_(count), device_(std::move(device)) {
    if (device_) memory_ = device_->alloc(count * sizeof(float));
    else host_.assign(count, 0.0f);
}

Buffer::~Buffer() {
    if (device_ && memory_) device_->free(memory_);
}

float* Tensor::data() {
    if (!buffer_) return nullptr;
    if (Device* d = buffer_->device())
        throw DarknetError("a " + shape_.str() + " tensor lives on " + d->info().id +
                           ": copy it to the host first (to_host / download)");
    return buffer_->host();
}

void Tensor::out_of_range(size_t i) const {
    throw DarknetError("element " + std::to_string(i) + " of a " + shape_.str() + " tensor (" +
                       std::to_string(shape_.size()) + " elements): an op was given inconsistent shapes");
}

void Tensor::resize(Shape s) {
    if (!buffer_ || buffer_->count() < s.size())
        buffer_ = std::make_shared<Buffer>(buffer_ ? buffer_->device_ptr() : nullptr, s.size());
    shape_ = s;
}

void copy_from_host(const float* src, Tensor& dst) {
    if (dst.on_host()) {
        if (dst.size()) std::memcpy(dst.data(), src, dst.size() * sizeof(float));
        return;
    }
    dst.device()->upload(dst.memory(), 0, src, dst.size() * sizeof(float));
}

void copy_to_host(const Tensor& src, float* dst) {
    if (src.on_host()) {
        if (src.size()) std::memcpy(dst, src.data(), src.size() * sizeof(float));
        return;
    }
    src.device()->download(src.memory(), 0, dst, src.size() * sizeof(float));
}

void copy_to_host(const Tensor& src, size_t offset, size_t count, float* dst) {
    if (offset + count > src.size())
        throw DarknetError("copy of floats [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                           ") from a tensor of " + std::to_string(src.size()));
    if (!count) return;
    if (src.on_host()) {
        std::memcpy(dst, src.data() + offset, count * sizeof(float));
        return;
    }
    src.device()->download(src.memory(), offset * sizeof(float), dst, count * sizeof(float));
}

void copy_tensor(const Tensor& src, Tensor& dst) {
    if (src.size() != dst.size())
        throw DarknetError("copy between tensors of different sizes: " + src.shape().str() + " -> " + dst.shape().str());
    if (src.on_host()) return copy_from_host(src.data(), dst);
    if (dst.on_host()) return copy_to_host(src, dst.data());
    if (src.device() == dst.device())
        return src.device()->copy(src.memory(), 0, dst.memory(), 0, src.size() * sizeof(float));
    std::vector<float> staging(src.size());
    copy_to_host(src, staging.data());
    copy_from_host(staging.data(), dst);
}

Tensor to_host(const Tensor& t) {
    if (t.on_host()) return t;
    Tensor h(t.shape());
    copy_to_host(t, h.data());
    return h;
}

}  // namespace dn
