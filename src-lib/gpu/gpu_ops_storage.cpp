// GpuBackend's storage types and layouts (src-lib/gpu/PRECISION.md): conversions between them, the
// half (and NHWC) copies of fp32 parameters that an op takes, and the checks that one op's tensors agree.
#include "../errors.h"
#include "../kernels/args_forward.h"
#include "gpu_backend.h"

namespace dn {

std::string GpuBackend::storage_kernel(const char* base, DType t) {
    return std::string(base) + (t == DType::f16 ? "_f16" : t == DType::bf16 ? "_bf16" : "_f32");
}

DType GpuBackend::same_storage(const char* op, std::initializer_list<const Tensor*> tensors) {
    DType t = (*tensors.begin())->dtype();
    for (const Tensor* x : tensors)
        if (x->dtype() != t)
            throw DarknetError(std::string(op) + ": tensors in " + dtype_name(t) + " and " + dtype_name(x->dtype()) +
                               " (one op takes one storage type; Backend::convert converts)");
    return t;
}

Layout GpuBackend::same_layout(const char* op, std::initializer_list<const Tensor*> tensors) {
    Layout l = (*tensors.begin())->layout();
    for (const Tensor* x : tensors)
        if (x->layout() != l)
            throw DarknetError(std::string(op) + ": tensors in " + layout_name(l) + " and " + layout_name(x->layout()) +
                               " (one op takes one layout; Backend::convert converts)");
    return l;
}

RelayoutArgs GpuBackend::relayout_args(const Tensor& x, Layout to) {
    const Shape& s = x.shape();
    return RelayoutArgs{(int32_t)x.size(), s.c, (int32_t)s.plane(), to == Layout::nhwc ? 1 : 0};
}

void GpuBackend::relayout(const Tensor& x, Tensor& y) {
    require_same_size("relayout", x, y);
    const DType t = same_storage("relayout", {&x, &y});
    launch(storage_kernel("relayout", t).c_str(), x.size(), {flat_buf(y), flat_buf(x)}, relayout_args(x, y.layout()));
}

Tensor GpuBackend::nchw_scratch(const Tensor& t, int slot, bool copy) {
    if (t.layout() == Layout::nchw) return t;
    Tensor n(t.shape(), scratch(slot, t.size(), t.dtype()).buffer());
    if (copy) relayout(t, n);
    return n;
}

void GpuBackend::convert(const Tensor& x, Tensor& y) {
    require_same_size("convert", x, y);
    if (x.layout() != y.layout()) {
        if (x.dtype() == y.dtype()) return relayout(x, y);
        if (x.dtype() == DType::f32)  // fp32 weights or input into their half copy: one pass
            return launch(storage_kernel("pack_relayout", y.dtype()).c_str(), x.size(), {flat_buf(y), flat_buf(x)},
                          relayout_args(x, y.layout()));
        // else the type first (the smaller copy), then the layout
        Tensor typed(x.shape(), scratch(6, x.size(), y.dtype(), x.layout()).buffer());
        convert(x, typed);
        return relayout(typed, y);
    }
    CountArgs a{(int32_t)x.size()};
    if (x.dtype() == y.dtype()) {
        if (x.buffer() != y.buffer()) copy_tensor(x, y);
    } else if (x.dtype() == DType::f32) {
        launch(storage_kernel("pack", y.dtype()).c_str(), x.size(), {flat_buf(y), flat_buf(x)}, a);
    } else if (y.dtype() == DType::f32) {
        launch(storage_kernel("unpack", x.dtype()).c_str(), x.size(), {flat_buf(y), flat_buf(x)}, a);
    } else {  // fp16 <-> bf16: through fp32
        convert(widened(x), y);
    }
}

Tensor GpuBackend::widened(const Tensor& x) {
    if (x.dtype() == DType::f32) return x;
    Tensor wide(x.shape(), scratch(5, x.size(), DType::f32, x.layout()).buffer());
    convert(x, wide);
    return wide;
}

const Tensor& GpuBackend::param_in(const Tensor& p, DType t, Layout l) {
    if (p.dtype() == t && p.layout() == l) return p;
    auto key = std::make_tuple(p.buffer().get(), t, l);
    auto it = param_copies_.find(key);
    if (it == param_copies_.end() || it->second.of.lock() != p.buffer() || it->second.copy.size() != p.size()) {
        for (auto i = param_copies_.begin(); i != param_copies_.end();)  // drop the copies of freed parameters
            i = i->second.of.expired() ? param_copies_.erase(i) : std::next(i);
        it = param_copies_.insert_or_assign(key, ParamCopy{p.buffer(), alloc(p.shape(), t, l)}).first;
    }
    if (!derived_current(it->second.copy)) convert(p, it->second.copy);
    return it->second.copy;
}

bool GpuBackend::derived_current(const Tensor& derived) {
    if (params_version_ == 0) return false;  // nobody says when the parameters change: derive every time
    auto it = derived_at_.find(derived.buffer().get());
    if (it != derived_at_.end() && it->second.buffer.lock() == derived.buffer() && it->second.version == params_version_)
        return true;
    if (it == derived_at_.end())
        for (auto i = derived_at_.begin(); i != derived_at_.end();)  // forget freed ones
            i = i->second.buffer.expired() ? derived_at_.erase(i) : std::next(i);
    derived_at_[derived.buffer().get()] = DerivedAt{derived.buffer(), params_version_};
    return false;
}

}  // namespace dn
