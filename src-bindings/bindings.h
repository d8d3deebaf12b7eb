// What the binding files share: NumPy <-> Tensor conversions (copies, or live views of host memory).
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

#include "errors.h"
#include "tensor.h"

namespace dn_py {

namespace py = pybind11;
using dn::Shape;
using dn::Buffer;
using dn::Tensor;

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

inline Tensor to_tensor(const FloatArray& a) {
    if (a.ndim() < 1 || a.ndim() > 4) throw dn::DarknetError("expected an array of 1 to 4 dimensions, got " + std::to_string(a.ndim()));
    int d[4] = {1, 1, 1, 1};
    for (int i = 0; i < a.ndim(); ++i) {
        if (a.shape(i) > (py::ssize_t)(1 << 30))  // Shape holds ints
            throw dn::DarknetError("array dimension " + std::to_string(i) + " is " + std::to_string(a.shape(i)) +
                                   ", more than the engine's limit of 2^30");
        d[4 - a.ndim() + i] = (int)a.shape(i);
    }
    Tensor t(Shape{d[0], d[1], d[2], d[3]});
    copy_from_host(a.data(), t);
    return t;
}

// The storage type a batch array holds, by its NumPy dtype: float32 fp32, float16 fp16, uint16 bf16 (NumPy
// has no bfloat16: its bits, as _core.half_bits gives them); nullopt for any other dtype.
inline std::optional<dn::DType> batch_storage(const py::array& a) {
    const char kind = a.dtype().kind();
    const py::ssize_t size = a.itemsize();
    if (kind == 'f' && size == 4) return dn::DType::f32;
    if (kind == 'f' && size == 2) return dn::DType::f16;
    if (kind == 'u' && size == 2) return dn::DType::bf16;
    return std::nullopt;
}

// The NumPy dtype that holds a storage type's batches (batch_storage's inverse), for messages.
inline std::string batch_dtype_name(dn::DType t) {
    return t == dn::DType::f32 ? "float32" : t == dn::DType::f16 ? "float16" : "uint16 (bf16 bits)";
}

// A copy of t (downloaded when t lives on a device), 4-D.
inline py::array_t<float> to_numpy(const Tensor& t) {
    const Shape& s = t.shape();
    py::array_t<float> out({s.n, s.c, s.h, s.w});
    copy_to_host(t, out.mutable_data());
    return out;
}

// A live NumPy view of a host tensor; the array keeps the tensor's buffer alive.
// `token`, where given, lives as long as the view (Network::param_view_token).
inline py::array_t<float> host_view(const Tensor& t, const std::vector<py::ssize_t>& shape,
                                    std::shared_ptr<const void> token = nullptr) {
    using Keep = std::pair<std::shared_ptr<Buffer>, std::shared_ptr<const void>>;
    auto* keep = new Keep(t.buffer(), std::move(token));
    py::capsule owner(keep, [](void* p) { delete static_cast<Keep*>(p); });
    return py::array_t<float>(shape, const_cast<Tensor&>(t).data(), owner);
}

}  // namespace dn_py
