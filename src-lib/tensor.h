// Tensor: an NCHW array = a shape plus a buffer that knows where it lives (host memory or one
// device's memory), its storage type (fp32; fp16 or bf16 on a GPU device, see src-lib/gpu/PRECISION.md)
// and its layout in that memory (NCHW; NHWC on a GPU device that prefers it, behind the ops: the
// shape, every op's meaning and every host copy stay NCHW). Buffers are shared (reference-counted) so
// that layers can hand their outputs to later layers without copies. Elements are reachable only on the host (data());
// a device tensor crosses to the host through the explicit copies at the end of this file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dn {

class Device;
struct DeviceMemory;

struct Shape {
    int n = 1, c = 0, h = 0, w = 0;
    size_t size() const { return (size_t)n * c * h * w; }
    size_t plane() const { return (size_t)h * w; }
    size_t sample() const { return (size_t)c * h * w; }
    bool operator==(const Shape& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
    bool operator!=(const Shape& o) const { return !(*this == o); }
    std::string str() const {
        return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
    }
};

// A tensor's storage type. Host memory is always fp32 (NumPy's float32 and every CPU op); the half
// types live only in device memory, where the host copies below convert on the way in and out.
enum class DType : uint8_t { f32, f16, bf16 };
inline size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
const char* dtype_name(DType t);  // "fp32", "fp16", "bf16": the names of the `precision` option
// DType of a precision name; throws DarknetError naming the three for anything else.
DType parse_dtype(const std::string& name);

// How a device buffer orders an NCHW tensor's elements. nhwc ("channels last") is what tensor-core
// convolutions read (cuDNN transposes NCHW half tensors around them otherwise): a device that
// prefers it (Backend::preferred_layout) keeps a network's activations so. Host memory is NCHW only;
// the host copies below transpose. src-lib/gpu/PRECISION.md, "Layout".
enum class Layout : uint8_t { nchw, nhwc };
const char* layout_name(Layout l);  // "nchw", "nhwc"

// One allocation of `count` elements of `dtype`: zeroed host memory (fp32, NCHW only), or memory of
// `device` (contents unspecified).
class Buffer {
public:
    explicit Buffer(size_t count) : count_(count), host_(count, 0.0f) {}
    Buffer(std::shared_ptr<Device> device, size_t count, DType dtype = DType::f32, Layout layout = Layout::nchw);
    ~Buffer();
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    size_t count() const { return count_; }
    DType dtype() const { return dtype_; }
    Layout layout() const { return layout_; }
    float* host() { return device_ ? nullptr : host_.data(); }
    Device* device() const { return device_.get(); }
    const std::shared_ptr<Device>& device_ptr() const { return device_; }
    DeviceMemory* memory() const { return memory_; }

private:
    size_t count_;
    DType dtype_ = DType::f32;
    Layout layout_ = Layout::nchw;
    std::vector<float> host_;
    std::shared_ptr<Device> device_;
    DeviceMemory* memory_ = nullptr;
};

class Tensor {
public:
    Tensor() = default;
    explicit Tensor(Shape s) : shape_(s), buffer_(std::make_shared<Buffer>(s.size())) {}  // host, zeroed
    Tensor(Shape s, std::shared_ptr<Buffer> b) : shape_(s), buffer_(std::move(b)) {}

    const Shape& shape() const { return shape_; }
    size_t size() const { return shape_.size(); }
    bool empty() const { return !buffer_ || shape_.size() == 0; }
    bool on_host() const { return !buffer_ || !buffer_->device(); }
    DType dtype() const { return buffer_ ? buffer_->dtype() : DType::f32; }
    Layout layout() const { return buffer_ ? buffer_->layout() : Layout::nchw; }
    Device* device() const { return buffer_ ? buffer_->device() : nullptr; }
    DeviceMemory* memory() const { return buffer_ ? buffer_->memory() : nullptr; }
    const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

    // Host elements. Throws DarknetError for a device tensor: copy it to the host first.
    float* data();
    const float* data() const { return const_cast<Tensor*>(this)->data(); }
    // One host element, bounds-checked (DarknetError past size()): for the reference backend's obvious
    // loops, which already pay data()'s device check per element; fast code takes data() once.
    float& operator[](size_t i) { return data()[checked(i)]; }
    float operator[](size_t i) const { return data()[checked(i)]; }

    // New shape in the same memory space, storage type and layout (host stays host, a device tensor stays on
    // its device); reallocates only when the element count grows; contents are unspecified afterwards.
    void resize(Shape s);

private:
    size_t checked(size_t i) const {
        if (i >= shape_.size()) out_of_range(i);
        return i;
    }
    [[noreturn]] void out_of_range(size_t i) const;  // out of line: keeps the check's fast path small
    Shape shape_;
    std::shared_ptr<Buffer> buffer_;
};

// ---- explicit host <-> device copies (plain memcpy where both sides are host memory) --------
// The host side is always fp32 NCHW; a half device tensor is converted on the host (half_convert.h,
// round to nearest even) on the way up and widened on the way down, and an NHWC one transposed, so
// every host view and every CPU fallback sees fp32 NCHW. Offsets and counts are in elements (NCHW
// order; a part of an NHWC tensor is refused: only whole NHWC tensors cross).
void copy_from_host(const float* src, Tensor& dst);   // dst.size() floats
void copy_to_host(const Tensor& src, float* dst);     // src.size() floats
void copy_to_host(const Tensor& src, size_t offset, size_t count, float* dst);  // floats [offset, offset + count)
void copy_tensor(const Tensor& src, Tensor& dst);     // same size, any memory spaces, storage types, layouts
// Throws DarknetError "<what> between tensors of different sizes: <a> -> <b>" unless a and b hold as many
// elements (the elementwise operations between two tensors of any shapes: copy, convert, add_scaled).
void require_same_size(const char* what, const Tensor& a, const Tensor& b);
Tensor to_host(const Tensor& t);                      // t itself when it is already on the host

}  // namespace dn
