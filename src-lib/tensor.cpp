#include "tensor.h"

#include <cstring>

#include "errors.h"
#include "gpu/device.h"
#include "half_convert.h"

namespace dn {

const char* layout_name(Layout l) { return l == Layout::nhwc ? "nhwc" : "nchw"; }

const char* dtype_name(DType t) { return t == DType::f16 ? "fp16" : t == DType::bf16 ? "bf16" : "fp32"; }

DType parse_dtype(const std::string& name) {
    if (name == "fp32") return DType::f32;
    if (name == "fp16") return DType::f16;
    if (name == "bf16") return DType::bf16;
    throw DarknetError("unknown precision '" + name + "' (known: fp32, fp16, bf16)");
}

Buffer::Buffer(std::shared_ptr<Device> device, size_t count, DType dtype, Layout layout)
    : count_(count), dtype_(dtype), layout_(layout), device_(std::move(device)) {
    if (device_) {
        memory_ = device_->alloc(count * dtype_size(dtype));
    } else {
        if (dtype != DType::f32)
            throw DarknetError(std::string("a host tensor in ") + dtype_name(dtype) + ": host memory is fp32 only");
        if (layout != Layout::nchw) throw DarknetError("a host tensor in NHWC: host memory is NCHW only");
        host_.assign(count, 0.0f);
    }
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
        buffer_ = std::make_shared<Buffer>(buffer_ ? buffer_->device_ptr() : nullptr, s.size(), dtype(), layout());
    shape_ = s;
}

// NCHW <-> NHWC of a whole tensor on the host (the device copies of an NHWC tensor)
static void nchw_to_nhwc(const float* src, float* dst, const Shape& s) {
    const size_t plane = s.plane(), sample = s.sample();
    for (size_t n = 0; n < (size_t)s.n; ++n)
        for (size_t c = 0; c < (size_t)s.c; ++c)
            for (size_t p = 0; p < plane; ++p) dst[n * sample + p * s.c + c] = src[n * sample + c * plane + p];
}

static void nhwc_to_nchw(const float* src, float* dst, const Shape& s) {
    const size_t plane = s.plane(), sample = s.sample();
    for (size_t n = 0; n < (size_t)s.n; ++n)
        for (size_t c = 0; c < (size_t)s.c; ++c)
            for (size_t p = 0; p < plane; ++p) dst[n * sample + c * plane + p] = src[n * sample + p * s.c + c];
}

// Elements in the device's order (an NHWC tensor's, untransposed), converted to its storage type.
static void upload_stored(const float* src, Tensor& dst) {
    if (dst.dtype() == DType::f32) return dst.device()->upload(dst.memory(), 0, src, dst.size() * sizeof(float));
    std::vector<uint16_t> half(dst.size());
    f32_to_half(src, half.data(), half.size(), dst.dtype() == DType::bf16);
    dst.device()->upload(dst.memory(), 0, half.data(), half.size() * 2);
}

static void download_stored(const Tensor& src, size_t offset, size_t count, float* dst) {
    if (src.dtype() == DType::f32)
        return src.device()->download(src.memory(), offset * sizeof(float), dst, count * sizeof(float));
    std::vector<uint16_t> half(count);
    src.device()->download(src.memory(), offset * 2, half.data(), count * 2);
    half_to_f32(half.data(), dst, count, src.dtype() == DType::bf16);
}

void copy_from_host(const float* src, Tensor& dst) {
    if (dst.on_host()) {
        if (dst.size()) std::memcpy(dst.data(), src, dst.size() * sizeof(float));
        return;
    }
    if (dst.layout() == Layout::nchw) return upload_stored(src, dst);
    std::vector<float> nhwc(dst.size());
    nchw_to_nhwc(src, nhwc.data(), dst.shape());
    upload_stored(nhwc.data(), dst);
}

void copy_to_host(const Tensor& src, float* dst) { copy_to_host(src, 0, src.size(), dst); }

void copy_to_host(const Tensor& src, size_t offset, size_t count, float* dst) {
    if (offset + count > src.size())
        throw DarknetError("copy of floats [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                           ") from a tensor of " + std::to_string(src.size()));
    if (!count) return;
    if (src.on_host()) {
        std::memcpy(dst, src.data() + offset, count * sizeof(float));
        return;
    }
    if (src.layout() == Layout::nchw) return download_stored(src, offset, count, dst);
    if (offset != 0 || count != src.size())
        throw DarknetError("a part of the NHWC tensor " + src.shape().str() + " was asked for: only whole NHWC "
                           "tensors are copied to the host");
    std::vector<float> nhwc(count);
    download_stored(src, 0, count, nhwc.data());
    nhwc_to_nchw(nhwc.data(), dst, src.shape());
}

void require_same_size(const char* what, const Tensor& a, const Tensor& b) {
    if (a.size() != b.size())
        throw DarknetError(std::string(what) + " between tensors of different sizes: " + a.shape().str() + " -> " +
                           b.shape().str());
}

void copy_tensor(const Tensor& src, Tensor& dst) {
    require_same_size("copy", src, dst);
    if (src.on_host()) return copy_from_host(src.data(), dst);
    if (dst.on_host()) return copy_to_host(src, dst.data());
    if (src.device() == dst.device() && src.dtype() == dst.dtype() && src.layout() == dst.layout())
        return src.device()->copy(src.memory(), 0, dst.memory(), 0, src.size() * dtype_size(src.dtype()));
    // other devices, storage types or layouts: through fp32 NCHW on the host (Backend::convert does it on a device)
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
