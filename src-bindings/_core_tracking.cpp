// Bindings of ByteTrack (src-lib/tracking/bytetrack.h), which python/darknet_py/tracking/bytetrack.py
// drives once per frame: begin, the first assignment, second, the second assignment, finish.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "bindings.h"
#include "tracking/bytetrack.h"

using namespace dn;
using namespace dn_py;

namespace {

using F32 = py::array_t<float, py::array::c_style | py::array::forcecast>;
using F64 = py::array_t<double, py::array::c_style | py::array::forcecast>;
using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

py::array_t<float> matrix(const std::vector<float>& v, size_t rows, size_t cols) {
    py::array_t<float> out({(py::ssize_t)rows, (py::ssize_t)cols});
    std::copy(v.begin(), v.end(), out.mutable_data());
    return out;
}

std::vector<int64_t> as_vector(const I64& a) { return std::vector<int64_t>(a.data(), a.data() + a.size()); }

}  // namespace

void bind_tracking(py::module_& m) {
    m.def("iou_matrix", [](const F64& a, const F64& b) {
        if ((a.size() && (a.ndim() != 2 || a.shape(1) != 4)) || (b.size() && (b.ndim() != 2 || b.shape(1) != 4)))
            throw DarknetError("iou_matrix: boxes must be n x 4");
        const size_t na = a.size() / 4, nb = b.size() / 4;
        return matrix(iou_matrix(a.data(), na, b.data(), nb), na, nb);
    }, py::arg("a"), py::arg("b"), "IoU of each x1, y1, x2, y2 box of a with each of b, float32 (supervision's box_iou_batch)");

    py::class_<ByteTrack>(m, "ByteTrackCore", "ByteTrack but its optimal assignments (darknet_py.tracking.bytetrack)")
        .def(py::init([](int64_t max_missed, int64_t min_streak, double min_iou, double high, double activation) {
                 return ByteTrack(ByteTrackParams{max_missed, min_streak, (float)min_iou, (float)high, activation});
             }),
             py::arg("maximum_frames_without_update"), py::arg("minimum_consecutive_frames"),
             py::arg("minimum_iou_threshold"), py::arg("high_conf_det_threshold"), py::arg("track_activation_threshold"))
        .def("begin", [](ByteTrack& t, const F32& boxes, const F32& confidence) {
                 const size_t n = (size_t)confidence.size();
                 if ((size_t)boxes.size() != 4 * n) throw DarknetError("ByteTrack.begin: boxes must be n x 4 for n confidences");
                 std::vector<float> iou = t.begin(boxes.data(), confidence.data(), n);
                 return matrix(iou, iou.empty() ? 0 : t.size(), iou.empty() ? 0 : t.high_count());
             }, py::arg("boxes"), py::arg("confidence"))
        .def("second", [](ByteTrack& t, const I64& rows, const I64& cols) {
                 std::vector<float> iou = t.second(as_vector(rows), as_vector(cols));
                 return matrix(iou, iou.empty() ? 0 : t.left_count(), iou.empty() ? 0 : t.low_count());
             }, py::arg("rows"), py::arg("cols"))
        .def("finish", [](ByteTrack& t, const I64& rows, const I64& cols) {
                 std::vector<int64_t> ids = t.finish(as_vector(rows), as_vector(cols));
                 py::array_t<int64_t> out((py::ssize_t)ids.size());
                 std::copy(ids.begin(), ids.end(), out.mutable_data());
                 return out;
             }, py::arg("rows"), py::arg("cols"))
        .def_property_readonly("boxes", [](const ByteTrack& t) {
                 py::array_t<double> out({(py::ssize_t)t.size(), (py::ssize_t)4});
                 for (size_t i = 0; i < t.size(); ++i)
                     std::copy(t.tracks()[i].box, t.tracks()[i].box + 4, out.mutable_data() + 4 * i);
                 return out;
             })
        .def_property_readonly("ids", [](const ByteTrack& t) {
                 py::array_t<int64_t> out((py::ssize_t)t.size());
                 for (size_t i = 0; i < t.size(); ++i) out.mutable_data()[i] = t.tracks()[i].id;
                 return out;
             })
        .def("__len__", &ByteTrack::size);
}
