// The pybind11 module: the engine's Python face. Arrays cross as NumPy float32 (copies where the
// engine owns the result; parameter arrays are live views). DarknetError becomes a ValueError.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arg_checks.h"
#include "backend.h"
#include "bindings.h"
#include "image.h"
#include "network.h"
#include "weights.h"
#include "yolo/detect.h"
#include "yolo/loss.h"

using namespace dn;
using namespace dn_py;

void bind_ops(py::module_& m);  // _core_ops.cpp
void bind_test_devices(py::module_& m);  // _core_test_devices.cpp
void bind_distributed(py::module_& m);  // _core_distributed.cpp
void bind_loader(py::module_& m);  // _core_loader.cpp
void bind_tracking(py::module_& m);  // _core_tracking.cpp
void bind_system(py::module_& m);  // _core_system.cpp

namespace {
// update() and queue_update() take the same step arguments.
void check_update_args(const char* call, float lr, int batch, int t) {
    check_min(call, "batch", batch, 1), check_min(call, "t", t, 0);
    if (!std::isfinite(lr)) bad_arg(call, "lr", "a finite number", std::to_string(lr));
}

py::array_t<float> planar_to_numpy(const PlanarImage& im) {
    py::array_t<float> out({im.c, im.h, im.w});
    std::memcpy(out.mutable_data(), im.data.data(), im.data.size() * sizeof(float));
    return out;
}

PlanarImage numpy_bgr_to_planar(const py::array& img) {
    if (img.dtype().kind() != 'u' || img.itemsize() != 1)
        throw DarknetError("image must be uint8 (as cv2.imread returns), got dtype " + std::string(py::str(img.dtype())));
    auto a = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(img);
    if (a.ndim() != 2 && a.ndim() != 3) throw DarknetError("image must be HxW or HxWxC, got " + std::to_string(a.ndim()) + " dimensions");
    int h = (int)a.shape(0), w = (int)a.shape(1), c = a.ndim() == 3 ? (int)a.shape(2) : 1;
    py::gil_scoped_release nogil;
    return from_bgr_u8(a.data(), w, h, c, (size_t)w * c);
}

py::dict layer_info(const Layer& l) {
    py::dict d;
    d["index"] = l.index;
    d["type"] = std::string(l.type());
    d["line"] = l.line;
    d["input"] = py::make_tuple(l.in.c, l.in.h, l.in.w);
    d["output"] = py::make_tuple(l.out.c, l.out.h, l.out.w);
    d["bflops"] = l.bflops();
    d["params"] = l.describe();
    d["sources"] = l.sources();
    return d;
}

// Layer index i of n (negative counts from the end, as in Python), or DarknetError naming `call`.
int layer_arg(const Network& n, int i, const std::string& call) {
    int count = (int)n.layers.size();
    if (i < -count || i >= count)
        throw DarknetError(call + ": layer index " + std::to_string(i) + " is out of range: the network has " +
                           std::to_string(count) + " layers (0.." + std::to_string(count - 1) +
                           ", negative counts from the end)");
    return i < 0 ? i + count : i;
}

// The outputs of layers `which` (indices checked) as NumPy copies.
py::list layer_outputs(const Network& n, const LayerOutputs& outs, const std::vector<int>& which, const std::string& call) {
    py::list result;
    for (int i : which) result.append(to_numpy(outs[layer_arg(n, i, call)]));
    return result;
}

// yolo_loss's truths: per image a (k, 5) array of x, y, w, h (relative, centre form) and class.
std::vector<std::vector<TruthBox>> truth_boxes(const Network& n, const std::vector<FloatArray>& truths,
                                               const char* call) {
    if ((int)truths.size() != n.train_batch())
        bad_arg(call, "truths", "one array per image of the forward_train batch (" + std::to_string(n.train_batch()) + ")",
                std::to_string(truths.size()) + " arrays");
    int classes = n.yolo_layers().empty() ? 0 : n.yolo(n.yolo_layers().back()).spec.classes;
    std::vector<std::vector<TruthBox>> boxes(truths.size());
    for (size_t b = 0; b < truths.size(); ++b) {
        const FloatArray& t = truths[b];
        std::string arg = "truths[" + std::to_string(b) + "]";
        if (t.size() == 0) continue;
        if (t.ndim() != 2 || t.shape(1) != 5) bad_arg(call, arg, "a (k, 5) array of x, y, w, h, class", dims_str(t));
        for (py::ssize_t k = 0; k < t.shape(0); ++k) {
            const float* r = t.data() + k * 5;
            std::string row = arg + " row " + std::to_string(k);
            for (int e = 0; e < 5; ++e)
                if (!std::isfinite(r[e])) bad_arg(call, row, "finite numbers", std::to_string(r[e]));
            // a class outside 0..classes-1 is skipped by the loss, as Darknet's yolo layer skips it
            if (r[4] != std::floor(r[4]) || std::fabs(r[4]) > 1e9f)
                bad_arg(call, row + " class", "a whole number (0.." + std::to_string(classes - 1) + "; others are skipped)",
                        std::to_string(r[4]));
            boxes[b].push_back(TruthBox{Box{r[0], r[1], r[2], r[3]}, (int)r[4]});
        }
    }
    return boxes;
}

// Net.pin_memory: a copy of `a` in the device's page-locked host memory (Device::host_alloc), given back
// to the device when the array goes; `a` itself where the device has none. A batch array keeps its dtype
// (float32, or a half batch: float16, uint16); any other becomes float32, as forward() takes it.
py::array pin_memory(const std::shared_ptr<Device>& device, const py::array& x) {
    py::array a = batch_storage(x) ? py::array::ensure(x, py::array::c_style) : py::array(FloatArray::ensure(x));
    if (!a) bad_arg("pin_memory", "array", "numbers (float32)", std::string(py::str(x.dtype())));
    size_t bytes = (size_t)a.nbytes();
    void* p = device && bytes ? device->host_alloc(bytes) : nullptr;
    if (!p) return a;
    std::memcpy(p, a.data(), bytes);
    using Block = std::pair<std::shared_ptr<Device>, void*>;
    py::capsule owner(new Block(device, p), [](void* b) {
        auto* block = static_cast<Block*>(b);
        block->first->host_free(block->second);
        delete block;
    });
    return py::array(a.dtype(), std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()), p, owner);
}

// The batch of forward() / forward_train(): float32 (another dtype, but a half one, is converted to it as
// before), or the network's own half storage as it is (float16 for fp16, uint16 holding bf16 bits for
// bf16: half the bytes to upload, and no conversion on the device). A half batch for a network in
// another precision is refused, naming both.
struct InputBatch {
    py::array array;  // C-contiguous, in `type`
    DType type;
    Shape shape;
};

InputBatch input_batch(const Network& n, const std::string& call, const py::array& x) {
    std::optional<DType> t = batch_storage(x);
    if (!t || *t == DType::f32) {
        FloatArray a = FloatArray::ensure(x);
        if (!a) bad_arg(call, "x", "numbers (float32)", std::string(py::str(x.dtype())));
        return InputBatch{a, DType::f32, nchw(call, "x", a, 0)};  // the batch and CxHxW are the network's to check
    }
    if (*t != n.precision())
        bad_arg(call, "x", n.precision() == DType::f32
                               ? "float32: the network runs fp32 (a half batch is taken by a network in its precision)"
                               : "float32 or " + batch_dtype_name(n.precision()) + ": the network runs " +
                                     dtype_name(n.precision()),
                std::string(py::str(x.dtype())) + " (" + dtype_name(*t) + " values)");
    return InputBatch{py::array::ensure(x, py::array::c_style), *t, nchw(call, "x", x, 0)};
}

// Takes the network's call lock with the GIL released: the thread holding the lock may need the GIL
// to finish its call, so waiting for the lock while holding the GIL could deadlock. Every method of
// Net takes it first, so calls on one network from many threads are serialized (any order).
std::unique_lock<std::mutex> lock_net(const Network& n) {
    std::unique_lock<std::mutex> lk(n.call_mutex, std::try_to_lock);
    if (lk.owns_lock()) return lk;
    py::gil_scoped_release nogil;
    lk.lock();
    return lk;
}

// A resize's output is one tensor: held to the engine's limit per tensor (as a cfg's sizes are).
void check_output_size(const char* call, int w, int h, int channels = 3) {
    if ((double)w * h * channels > kMaxTensorFloats)
        throw DarknetError(std::string(call) + ": a " + std::to_string(w) + "x" + std::to_string(h) + "x" +
                           std::to_string(channels) + " output is over the engine's limit of " +
                           std::to_string((long long)kMaxTensorFloats) + " floats (1 GiB) per tensor");
}

// yolo_loss's statistics of one head as the dict Python reads.
py::dict head_stats_dict(int layer, const YoloLossStats& s) {
    py::dict d;
    d["layer"] = layer;
    d["loss"] = s.loss;
    d["avg_iou"] = s.avg_iou;
    d["class"] = s.avg_class;
    d["obj"] = s.avg_obj;
    d["no_obj"] = s.avg_noobj;
    d["recall50"] = s.recall50;
    d["recall75"] = s.recall75;
    d["count"] = s.count;
    return d;
}

// queue_yolo_loss's result: every head's queued loss, read on demand (once; later reads repeat it).
struct QueuedLoss {
    std::vector<int> layers;
    std::vector<QueuedYoloLoss> heads;
    std::vector<YoloLossStats> stats;  // filled by the first read
    py::list read() {
        if (stats.empty() && !heads.empty()) {
            py::gil_scoped_release nogil;
            for (const QueuedYoloLoss& q : heads) stats.push_back(read_yolo_loss(q));
            heads.clear();  // the device buffers go back to the pool
        }
        py::list out;
        for (size_t k = 0; k < stats.size(); ++k) out.append(head_stats_dict(layers[k], stats[k]));
        return out;
    }
};

// Queues the yolo loss of the network's last forward_train on every head (deltas filled).
QueuedLoss queue_heads_loss(Network& n, const std::vector<FloatArray>& truths, const char* call) {
    n.require_training_state(std::string(call) + "()");
    std::vector<std::vector<TruthBox>> boxes = truth_boxes(n, truths, call);
    QueuedLoss q;
    q.layers = n.yolo_layers();
    py::gil_scoped_release nogil;
    // the truths go to the device once for all heads
    Tensor packed = n.backend().adopt(yolo_truths(boxes, (int)boxes.size()));
    for (int li : q.layers)
        q.heads.push_back(queue_yolo_loss(n.backend(), n.yolo(li), n.outputs()[li], n.deltas()[li], packed,
                                          n.options.width, n.options.height));
    return q;
}

// queue_update's result: the step's overflow check, learnt on demand (in the order the steps were queued).
struct QueuedUpdate {
    Network* net;  // kept alive by the binding (py::keep_alive)
    std::shared_ptr<const UpdateCheck> check;
    py::dict read() {
        if (!check->learnt) {
            auto lk = lock_net(*net);
            py::gil_scoped_release nogil;
            net->learn_update_checks(check.get());
        }
        py::dict d;
        d["applied"] = check->applied;
        d["loss_scale"] = check->scale;
        d["next_loss_scale"] = check->next_scale;
        return d;
    }
};

PyObject* darknet_error_type = nullptr;  // the Python DarknetError class, owned by the module

py::str lenient_str(const std::string& s) {
    return py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(s.data(), (Py_ssize_t)s.size(), "backslashreplace"));
}

}  // namespace

// One detect result row: class, confidence and the box in pixels (left, top, width, height).
struct DetectionRow {
    int cls;
    float conf, x, y, w, h;
};

// clip: boxes clipped to the image, and those left empty dropped; without, the boxes as Darknet's
// `detector map` matches them (validate_detector_map takes dets[i].bbox as it is)
std::vector<DetectionRow> detection_rows(const std::vector<Detection>& dets, int width, int height, float thresh,
                                         bool clip = true) {
    std::vector<DetectionRow> rows;
    float W = (float)width, H = (float)height;
    for (const Detection& d : dets) {
        float x0 = (d.box.x - d.box.w / 2) * W, y0 = (d.box.y - d.box.h / 2) * H;
        float x1 = (d.box.x + d.box.w / 2) * W, y1 = (d.box.y + d.box.h / 2) * H;
        if (clip) {
            x0 = std::max(0.0f, x0), y0 = std::max(0.0f, y0), x1 = std::min(W, x1), y1 = std::min(H, y1);
            if (x1 <= x0 || y1 <= y0) continue;
        }
        for (size_t k = 0; k < d.prob.size(); ++k)
            if (d.prob[k] > thresh) rows.push_back(DetectionRow{(int)k, d.prob[k], x0, y0, x1 - x0, y1 - y0});
    }
    return rows;
}

// postproc="compare": throws DarknetError at the first difference between the device's rows and the
// host's (class, confidence beyond 1e-4, box beyond 1e-3 px, a missing or extra detection).
void compare_detection_rows(const std::vector<std::vector<DetectionRow>>& dev,
                            const std::vector<std::vector<DetectionRow>>& host) {
    auto str = [](const DetectionRow& d) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "(class %d, confidence %.6g, box %.4f %.4f %.4f %.4f)", d.cls, d.conf, d.x,
                      d.y, d.w, d.h);
        return std::string(buf);
    };
    for (size_t b = 0; b < dev.size(); ++b) {
        const auto &g = dev[b], &w = host[b];
        std::string where = "postproc compare: image " + std::to_string(b) + ", detection ";
        for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
            const DetectionRow &p = g[i], &q = w[i];
            float box = std::max(std::max(std::fabs(p.x - q.x), std::fabs(p.y - q.y)),
                                 std::max(std::fabs(p.w - q.w), std::fabs(p.h - q.h)));
            const char* what = p.cls != q.cls ? "class" : std::fabs(p.conf - q.conf) > 1e-4f ? "confidence"
                               : box > 1e-3f ? "box" : nullptr;
            if (what)
                throw DarknetError(where + std::to_string(i) + ": " + what + " differs: device " + str(p) + ", cpu " +
                                   str(q));
        }
        if (g.size() != w.size()) {
            bool extra = g.size() > w.size();
            const DetectionRow& d = extra ? g[w.size()] : w[g.size()];
            throw DarknetError(where + std::to_string(std::min(g.size(), w.size())) + ": " +
                               (extra ? "extra on the device " : "missing on the device ") + str(d) + " (device " +
                               std::to_string(g.size()) + ", cpu " + std::to_string(w.size()) + " detections)");
        }
    }
}

PYBIND11_MODULE(_core, m) {
    m.doc() = "darknet_py native engine";
    py::register_exception<DarknetError>(m, "DarknetError", PyExc_ValueError);
    // Messages quote cfg text, which may hold any bytes: decode them leniently (invalid UTF-8 shown
    // as \xNN) so that a corrupt file raises DarknetError, not UnicodeDecodeError.
    darknet_error_type = m.attr("DarknetError").ptr();
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const DarknetError& e) {
            py::str msg = lenient_str(e.what());
            PyErr_SetObject(darknet_error_type, msg.ptr());
        }
    });

    bind_system(m);

    m.def("preprocess", [](const py::array& img, int w, int h, bool letterbox) {
        check_range("preprocess", "width", w, 1, 65536), check_range("preprocess", "height", h, 1, 65536);
        check_output_size("preprocess", w, h);
        PlanarImage im = numpy_bgr_to_planar(img);
        PlanarImage out;
        {
            py::gil_scoped_release nogil;
            out = letterbox ? letterbox_darknet(im, w, h) : resize_darknet(im, w, h);
        }
        return planar_to_numpy(out);
    }, py::arg("image"), py::arg("width"), py::arg("height"), py::arg("letterbox") = false,
       "BGR uint8 image -> float32 CHW RGB in [0,1] at the network size, as Darknet's detector test prepares it.");

    m.def("resize_darknet", [](const FloatArray& chw, int w, int h) {
        check_ndim("resize_darknet", "image", chw, 3);
        check_range("resize_darknet", "width", w, 1, 65536), check_range("resize_darknet", "height", h, 1, 65536);
        check_output_size("resize_darknet", w, h, (int)chw.shape(0));
        PlanarImage im;
        im.c = (int)chw.shape(0), im.h = (int)chw.shape(1), im.w = (int)chw.shape(2);
        im.data.assign(chw.data(), chw.data() + chw.size());
        return planar_to_numpy(resize_darknet(im, w, h));
    }, py::arg("image"), py::arg("width"), py::arg("height"), "Darknet's resize_image on a CxHxW float array.");

    py::class_<QueuedLoss>(m, "QueuedLoss")
        .def("read", &QueuedLoss::read,
             "The per-head statistics (yolo_loss's dicts), read from the device on the first call.");

    py::class_<QueuedUpdate>(m, "QueuedUpdate")
        .def("read", &QueuedUpdate::read,
             "{'applied', 'loss_scale', 'next_loss_scale'}: whether the step applied (False: fp16 gradients "
             "overflowed and the device skipped it), the loss scale its backward ran at, and the network's "
             "scale once this check was learnt. The first call reads the step's overflow flag (and those of "
             "the steps queued before it), waiting only for its check on CUDA and OpenCL.")
        .def_property_readonly("learnt", [](const QueuedUpdate& q) { return q.check->learnt; },
                               "Whether the step's check was read (read() then waits for nothing).");

    py::class_<Network>(m, "Net")
        .def(py::init([](const std::string& cfg, const std::string& device) {
            py::gil_scoped_release nogil;
            return std::make_unique<Network>(cfg, device);
        }), py::arg("cfg"), py::arg("device") = "cpu")
        .def_property_readonly("width", [](const Network& n) { auto lk = lock_net(n); return n.options.width; })
        .def_property_readonly("height", [](const Network& n) { auto lk = lock_net(n); return n.options.height; })
        .def_property_readonly("channels", [](const Network& n) { auto lk = lock_net(n); return n.options.channels; })
        .def_property_readonly("cfg_path", [](const Network& n) { auto lk = lock_net(n); return n.cfg_path; })
        .def_property("seen", [](const Network& n) { auto lk = lock_net(n); return n.seen; }, [](Network& n, uint64_t s) { auto lk = lock_net(n); n.seen = s; })
        .def_property_readonly("warnings", [](const Network& n) { auto lk = lock_net(n);
            py::list out;
            for (const std::string& w : n.warnings.items) out.append(lenient_str(w));
            return out;
        })
        .def_property_readonly("backend", [](const Network& n) { auto lk = lock_net(n); return std::string(n.backend().name()); })
        .def("clone", [](const Network& n) {
            auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            return n.clone();
        }, "Another network on the same device sharing these parameter values until either writes them "
           "(then the writer copies); its own activations, so it can run beside this one.")
        .def("shares_params", [](const Network& n) { auto lk = lock_net(n); return n.shares_params(); })
        .def("set_backend", [](Network& n, const std::string& name) { auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            n.set_backend(name);
        }, "Moves parameters and optimizer state to another device.")
        .def_property("precision", [](const Network& n) { auto lk = lock_net(n); return std::string(dtype_name(n.precision())); },
                      [](Network& n, const std::string& name) {
                          auto lk = lock_net(n);
                          n.set_precision(parse_dtype(name));
                      },
                      "Storage type of the activations: 'fp32', 'fp16' or 'bf16' (half on GPU devices, for detection and "
                      "training; fp16 training scales its loss: loss_scale).")
        .def_property_readonly("layout", [](const Network& n) {
            auto lk = lock_net(n);
            return std::string(layout_name(n.layout(n.options.batch)));
        }, "How the device holds the activations of a [net] batch: 'nchw', or 'nhwc' where its tensor-core "
           "convolutions want it (bf16 on CUDA with cuDNN, beyond one image; DARKNET_PY_LAYOUT=nchw|nhwc|auto "
           "overrides). Every array the network hands out is NCHW either way.")
        .def_property_readonly("precisions", [](const Network& n) {
            auto lk = lock_net(n);
            std::vector<std::string> names;
            for (DType t : n.backend().storage_types()) names.push_back(dtype_name(t));
            return names;
        }, "The precisions this network's device runs.")
        .def("pin_memory", [](const Network& n, const py::array& a) {
            auto lk = lock_net(n);
            return pin_memory(n.backend().device(), a);
        }, py::arg("array"),
           "A copy of a float32 array (or a half batch: float16, uint16 holding bf16) in page-locked host memory of "
           "the device (CUDA: cudaHostAlloc), as PyTorch's pin_memory() makes: uploads from it go by DMA alone, "
           "without the CPU's copy into staging buffers. The array itself (C-contiguous) where the device has none "
           "(the CPU, OpenCL, Metal).")
        .def("pin_host_memory", [](const Network& n, const py::buffer& b) {
            auto lk = lock_net(n);
            py::buffer_info info = b.request(true);
            auto dev = n.backend().device();
            return dev && dev->host_register(info.ptr, (size_t)(info.size * info.itemsize));
        }, py::arg("buffer"),
           "Page-locks a writable buffer in place (CUDA: cudaHostRegister), so that uploads from it go by DMA "
           "alone, without the CPU's copy into staging buffers: the loader's batch buffers in shared memory. "
           "False where the device offers none (the CPU, OpenCL, Metal) or refuses; then nothing changed. "
           "unpin_host_memory must follow before the buffer's memory is unmapped.")
        .def("unpin_host_memory", [](const Network& n, const py::buffer& b) {
            auto lk = lock_net(n);
            auto dev = n.backend().device();
            if (dev) dev->host_unregister(b.request().ptr);
        }, py::arg("buffer"), "Undoes pin_host_memory (nothing if that buffer was not pinned).")
        .def("bytes_moved", [](const Network& n) { auto lk = lock_net(n);
            auto dev = n.backend().device();
            py::dict d;
            d["up"] = dev ? dev->bytes_uploaded.load() : 0;
            d["down"] = dev ? dev->bytes_downloaded.load() : 0;
            d["blocking_downloads"] = dev ? dev->blocking_downloads.load() : 0;
            d["pinned_uploads"] = dev ? dev->pinned_uploads.load() : 0;
            return d;
        }, "Host->device ('up') and device->host ('down') bytes since the device was opened (0 on the CPU), "
           "'blocking_downloads': the downloads that waited for all the work queued before them, and "
           "'pinned_uploads': the uploads that went straight from pin_memory's arrays or pinned buffers.")
        .def("memory_stats", [](const Network& n) { auto lk = lock_net(n);
            auto dev = n.backend().device();
            DeviceMemoryStats s = dev ? dev->memory_stats() : DeviceMemoryStats{};
            py::dict d;
            d["in_use"] = s.in_use;
            d["reserved"] = s.reserved;
            d["peak_in_use"] = s.peak_in_use;
            d["peak_reserved"] = s.peak_reserved;
            return d;
        }, "The device's pooled memory in bytes (in_use, reserved, peak_in_use, peak_reserved; zeros where the "
           "device does not pool: the CPU, OpenCL).")
        .def("synchronize", [](Network& n) { auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            if (auto dev = n.backend().device()) dev->synchronize();
        }, "Waits until the device has finished the queued work (for timing).")
        .def_property("record_forwards", [](const Network& n) { auto lk = lock_net(n); return n.record_forwards; },
                      [](Network& n, bool on) { auto lk = lock_net(n); n.record_forwards = on; },
                       "Record fixed-shape forwards once and replay them (CUDA graphs); on by default.")
        .def_property_readonly("last_forward_replayed", [](const Network& n) {
            auto lk = lock_net(n);
            return n.last_forward_replayed();
        },
                               "Whether the last forward ran as a replayed recording.")
        .def("fallback_ops", [](const Network& n) { auto lk = lock_net(n);
            py::list out;
            for (size_t i = 0; i < n.layers.size(); ++i) {
                py::list ops;
                if (i < n.fallback_ops().size())
                    for (const std::string& op : n.fallback_ops()[i]) ops.append(op);
                out.append(ops);
            }
            return out;
        }, "Per layer, the ops that ran on the CPU instead of the device so far.")
        .def("resize_input", [](Network& n, int width, int height) {
            auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            n.resize_input(width, height);
        }, py::arg("width"), py::arg("height"),
             "Rebuilds for a new input size keeping parameters and optimizer state (multi-scale training).")
        .def("net_options", [](const Network& n) { auto lk = lock_net(n);
            const NetOptions& o = n.options;
            py::dict d;
            d["width"] = o.width; d["height"] = o.height; d["channels"] = o.channels;
            d["batch"] = o.batch; d["subdivisions"] = o.subdivisions;
            d["learning_rate"] = o.learning_rate; d["momentum"] = o.momentum; d["decay"] = o.decay;
            d["burn_in"] = o.burn_in; d["max_batches"] = o.max_batches; d["power"] = o.power; d["gamma"] = o.gamma;
            d["policy"] = o.policy; d["step"] = o.step; d["steps"] = o.steps; d["scales"] = o.scales;
            d["scale"] = o.scale; d["learning_rate_min"] = o.learning_rate_min;
            d["sgdr_cycle"] = o.sgdr_cycle; d["sgdr_mult"] = o.sgdr_mult;
            d["adam"] = o.adam; d["B1"] = o.B1; d["B2"] = o.B2; d["eps"] = o.eps;
            d["angle"] = o.angle; d["saturation"] = o.saturation; d["exposure"] = o.exposure; d["hue"] = o.hue;
            d["aspect"] = o.aspect; d["mosaic"] = o.mosaic; d["cutmix"] = o.cutmix; d["mixup"] = o.mixup;
            d["letter_box"] = o.letter_box; d["flip"] = o.flip; d["blur"] = o.blur;
            d["label_smooth_eps"] = o.label_smooth_eps;
            return d;
        }, "The [net] section's options, training ones included.")
        .def("yolo_train_options", [](const Network& n, int i) { auto lk = lock_net(n);
            const YoloSpec& s = n.yolo(layer_arg(n, i, "yolo_train_options")).spec;
            py::dict d;
            d["jitter"] = s.jitter; d["random"] = s.random; d["resize"] = s.resize; d["max_boxes"] = s.max_boxes;
            d["ignore_thresh"] = s.ignore_thresh; d["truth_thresh"] = s.truth_thresh; d["iou_thresh"] = s.iou_thresh;
            d["iou_loss"] = s.iou_loss; d["iou_normalizer"] = s.iou_normalizer; d["obj_normalizer"] = s.obj_normalizer;
            d["cls_normalizer"] = s.cls_normalizer; d["label_smooth_eps"] = s.label_smooth_eps;
            return d;
        })
        .def("cfg_sections", [](const Network& n) { auto lk = lock_net(n);
            py::list out;
            for (const Section& s : n.cfg().sections) {
                py::dict options;
                for (const auto& kv : s.options) options[lenient_str(kv.first)] = lenient_str(kv.second.value);
                py::dict d;
                d["type"] = s.type;
                d["line"] = s.line;
                d["options"] = options;
                out.append(d);
            }
            return out;
        }, "The parsed cfg as [{type, line, options: {key: value text}}]; sections[i + 1] built layer i.")
        .def_property_readonly("yolo_layers", [](const Network& n) { auto lk = lock_net(n); return n.yolo_layers(); })
        .def("layer_table", [](const Network& n) { auto lk = lock_net(n); return n.layer_table(); })
        .def("total_bflops", [](const Network& n) { auto lk = lock_net(n); return n.total_bflops(); })
        .def("layer_ms", [](const Network& n) { auto lk = lock_net(n); return n.layer_ms(); },
             "Milliseconds per layer in the last forward pass.")
        .def("layers", [](const Network& n) { auto lk = lock_net(n);
            py::list out;
            for (auto& l : n.layers) out.append(layer_info(*l));
            return out;
        })
        .def("yolo_info", [](const Network& n, int i) { auto lk = lock_net(n);
            const YoloSpec& s = n.yolo(layer_arg(n, i, "yolo_info")).spec;
            py::dict d;
            d["classes"] = s.classes;
            d["mask"] = s.mask;
            d["anchors"] = s.anchors;
            d["scale_x_y"] = s.scale_x_y;
            d["new_coords"] = s.new_coords;
            d["beta_nms"] = s.beta_nms;
            const char* kinds[] = {"default", "greedynms", "diounms", "cornersnms"};
            d["nms_kind"] = std::string(kinds[(int)s.nms_kind]);
            return d;
        })
        .def("params", [](py::object self, int i) {
            Network& n = self.cast<Network&>();
            auto lk = lock_net(n);
            if (n.backend().device() == nullptr) n.own_params();  // the views below are writable
            py::dict d;
            for (const Param& p : n.layers[layer_arg(n, i, "params")]->params) {
                const Shape& s = p.shape;
                std::vector<py::ssize_t> shape;
                for (int v : {s.n, s.c, s.h, s.w})
                    if (v != 1 || !shape.empty()) shape.push_back(v);
                if (shape.empty()) shape.push_back(1);
                if (p.value.on_host()) d[p.name.c_str()] = host_view(p.value, shape, n.param_view_token());
                else d[p.name.c_str()] = to_numpy(p.value).reshape(shape);
            }
            return d;
        }, "The layer's parameters in .weights file order: live NumPy views on the CPU, copies on a GPU.")
        .def("set_params", [](Network& n, int i, const py::dict& values) { auto lk = lock_net(n);
            i = layer_arg(n, i, "set_params");
            n.own_params();  // a clone sharing the values keeps its own
            Layer& l = *n.layers[i];
            for (auto item : values) {
                std::string name = py::str(item.first);
                auto it = std::find_if(l.params.begin(), l.params.end(), [&](const Param& p) { return p.name == name; });
                if (it == l.params.end()) {
                    std::string known;
                    for (const Param& p : l.params) known += (known.empty() ? "" : ", ") + p.name;
                    throw DarknetError("layer " + std::to_string(i) + " (" + l.type() + ") has no parameter '" + name +
                                       "' (it has: " + (known.empty() ? "none" : known) + ")");
                }
                FloatArray a = py::cast<FloatArray>(item.second);
                if ((size_t)a.size() != it->value.size())
                    throw DarknetError("layer " + std::to_string(i) + " " + name + " needs " +
                                       std::to_string(it->value.size()) + " values, got " + std::to_string(a.size()));
                copy_from_host(a.data(), it->value);
            }
        }, py::arg("i"), py::arg("values"), "Writes parameters of layer i from a {name: array} dict (any device).")
        .def("load_weights", [](Network& n, const std::string& path, int max_layers) { auto lk = lock_net(n);
            WeightsHeader h;
            {
                py::gil_scoped_release nogil;
                h = load_weights(n, path, max_layers);
            }
            py::dict d;
            d["major"] = h.major;
            d["minor"] = h.minor;
            d["revision"] = h.revision;
            d["seen"] = h.seen;
            return d;
        }, py::arg("path"), py::arg("max_layers") = -1)
        .def("save_weights", [](Network& n, const std::string& path, int max_layers) { auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            save_weights(n, path, max_layers);
        }, py::arg("path"), py::arg("max_layers") = -1)
        .def("forward", [](Network& n, const py::array& x, std::vector<int> which) { auto lk = lock_net(n);
            InputBatch in = input_batch(n, "forward", x);
            std::vector<int> kept;  // checked before the work, not after
            for (int i : which) kept.push_back(layer_arg(n, i, "forward"));
            const LayerOutputs* outs;
            {
                py::gil_scoped_release nogil;
                outs = &n.forward_kept(in.array.data(), in.shape, in.type, kept);  // straight from the array
            }
            return layer_outputs(n, *outs, which, "forward");
        }, py::arg("x"), py::arg("layers"), "Runs the network on x (NCHW float32, or a half batch: see "
           "forward_train); returns the outputs of the given layers. On CUDA, with forward_part set, a batch "
           "of two or more parts of forward_part images runs part by part, each part's upload beside the "
           "last part's work.")
        .def_property("forward_part", [](const Network& n) { auto lk = lock_net(n); return n.forward_part; },
                      [](Network& n, int images) { auto lk = lock_net(n);
                          if (images < 0) bad_arg("forward_part", "images", "0 (whole batches) or more", std::to_string(images));
                          n.forward_part = images;
                      }, "Images per part of forward()'s pipelined batches (CUDA): a batch of at least two "
                         "equal parts runs part by part, each part's upload beside the last part's work; "
                         "16 by default (DARKNET_PY_FORWARD_PART sets another); 0 runs every batch whole.")
        .def("forward_train", [](Network& n, const py::array& x, std::vector<int> which) { auto lk = lock_net(n);
            InputBatch in = input_batch(n, "forward_train", x);
            for (int i : which) layer_arg(n, i, "forward_train");
            const LayerOutputs* outs;
            {
                py::gil_scoped_release nogil;
                outs = &n.forward_train(in.array.data(), in.shape, in.type);
            }
            return layer_outputs(n, *outs, which, "forward_train");
        }, py::arg("x"), py::arg("layers"), "Training-mode forward; zeroes the deltas. x: NCHW float32, or in a "
           "half precision the network's own storage (float16 for fp16, uint16 holding bf16 bits for bf16, as "
           "half_bits gives them), uploaded as it is: half the bytes, and the same bits as the device's own "
           "conversion of the float32 batch.")
        .def("set_delta", [](Network& n, int i, const FloatArray& d) { auto lk = lock_net(n);
            n.require_training_state("set_delta()");
            i = layer_arg(n, i, "set_delta");
            Tensor& t = n.deltas()[i];
            std::string arg = "the delta of layer " + std::to_string(i);
            if (d.ndim() == 4) check_shape("set_delta", arg, nchw("set_delta", arg, d, 0), t.shape());
            else check_size("set_delta", arg + " (" + t.shape().str() + ")", (size_t)d.size(), t.size());
            float factor = n.delta_scale((size_t)i);
            if (factor == 1.0f) return copy_from_host(d.data(), t);
            std::vector<float> scaled(d.data(), d.data() + d.size());  // fp16: held times the loss scale
            for (float& v : scaled) v *= factor;
            copy_from_host(scaled.data(), t);
        }, "Sets dL/d(output) of layer i (after forward_train, before backward); in fp16 training it is held "
           "times the loss scale, as the backward runs (Network::delta_scale).")
        .def("yolo_loss", [](Network& n, const std::vector<FloatArray>& truths) { auto lk = lock_net(n);
            return queue_heads_loss(n, truths, "yolo_loss").read();
        }, "Darknet's yolo loss for the last forward_train: fills the heads' deltas, returns per-head statistics.")
        .def("queue_yolo_loss", [](Network& n, const std::vector<FloatArray>& truths) { auto lk = lock_net(n);
            return queue_heads_loss(n, truths, "queue_yolo_loss");
        }, "yolo_loss without waiting: fills the heads' deltas (backward may follow at once) and returns a "
           "QueuedLoss whose read() gives yolo_loss's statistics, waiting only for the loss kernels "
           "(not for the work queued since) on devices that can (CUDA, OpenCL).")
        .def("delta", [](Network& n, int i) { auto lk = lock_net(n);
            n.require_training_state("delta()");
            i = layer_arg(n, i, "delta");
            py::array_t<float> out = to_numpy(n.deltas()[i]);
            float factor = n.delta_scale((size_t)i);
            if (factor != 1.0f) {  // fp16: held times the loss scale; the true dL/d(output)
                float* p = out.mutable_data();
                for (py::ssize_t k = 0; k < out.size(); ++k) p[k] /= factor;
            }
            return out;
        }, "dL/d(output) of layer i from the last backward (in fp16, the loss scale divided out).")
        .def("backward", [](Network& n, bool all_reduce) { auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            n.backward(all_reduce);
        }, py::arg("all_reduce") = false,
           "Back-propagates; all_reduce: the iteration's last backward, whose gradients the collective sums "
           "over the ranks (set_collective) while it runs.")
        .def("update", [](Network& n, float lr, int batch, int t) { auto lk = lock_net(n);
            check_update_args("update", lr, batch, t);
            py::gil_scoped_release nogil;
            return n.update(lr, batch, t);
        }, py::arg("lr"), py::arg("batch"), py::arg("t") = 0,
           "SGD/Adam step; t = Adam's step (the iteration), 0 = count this network's updates. Returns False "
           "when fp16 gradients overflowed and the step was skipped (loss_scale halved). In fp16 it waits for "
           "the step's overflow check; queue_update does not.")
        .def("queue_update", [](Network& n, float lr, int batch, int t) { auto lk = lock_net(n);
            check_update_args("queue_update", lr, batch, t);
            py::gil_scoped_release nogil;
            return QueuedUpdate{&n, n.queue_update(lr, batch, t)};
        }, py::arg("lr"), py::arg("batch"), py::arg("t") = 0, py::keep_alive<0, 1>(),
           "update() without waiting: the step is queued whole; in fp16 the device checks the gradients for "
           "overflow and skips the step itself. Returns a QueuedUpdate whose read() tells whether it applied; "
           "loss_scale learns of an overflow only then, so a step queued meanwhile runs at the old scale.")
        .def_property_readonly("pending_update_checks", [](const Network& n) { auto lk = lock_net(n);
            return n.pending_update_checks();
        }, "Queued updates whose overflow check (fp16) was not read yet.")
        .def_property("loss_scale", [](const Network& n) { auto lk = lock_net(n); return n.loss_scaler.scale; },
                      [](Network& n, float v) { auto lk = lock_net(n);
                          n.learn_update_checks();  // the checks of queued steps first, then this scale
                          if (!n.loss_scaler.dynamic)
                              throw DarknetError(std::string("loss_scale: only fp16 training scales its loss (this "
                                                             "network is in ") + dtype_name(n.precision()) + ")");
                          if (!(v >= LossScaler::kMin && v <= LossScaler::kMax))
                              bad_arg("loss_scale", "loss_scale", "a number in [2^-16, 2^24]", std::to_string(v));
                          n.loss_scaler.scale = v;
                      }, "fp16 training's dynamic loss scale (1 in fp32 and bf16), as far as the host has learnt the queued "
                         "updates' checks (queue_update); settable, e.g. to start elsewhere.")
        .def_property_readonly("skipped_steps", [](Network& n) { auto lk = lock_net(n);
            py::gil_scoped_release nogil;
            n.learn_update_checks();  // the queued updates' too (waits for their checks)
            return n.loss_scaler.skipped_steps;
        }, "Steps update() or queue_update() skipped because fp16 gradients overflowed, since the precision was "
           "set (the queued updates' checks are read first).")
        .def("gradients", [](py::object self, int i) {
            Network& n = self.cast<Network&>();
            auto lk = lock_net(n);
            n.allocate_grads();
            py::dict d;
            for (const Param& p : n.layers[layer_arg(n, i, "gradients")]->params) {
                if (!p.has_grad) continue;
                const Shape& s = p.shape;
                if (p.grad.on_host()) d[p.name.c_str()] = host_view(p.grad, {s.n, s.c, s.h, s.w});
                else d[p.name.c_str()] = to_numpy(p.grad);
            }
            return d;
        }, "Gradient accumulators of layer i, 4-D (live views on the CPU, copies on a GPU).")
        .def("detect", [](Network& n, const FloatArray& x, std::vector<std::pair<int, int>> sizes, float thresh,
                          float nms_thresh, bool letterbox, const std::string& postproc, bool clip) { auto lk = lock_net(n);
            check_ndim("detect", "x", x, 4);
            if ((int)sizes.size() != x.shape(0))
                bad_arg("detect", "sizes", "one (width, height) per image (" + std::to_string(x.shape(0)) + ")",
                        std::to_string(sizes.size()) + " pairs");
            if (n.yolo_layers().empty()) throw DarknetError(n.cfg_path + ": this network has no [yolo] layer, so it cannot detect");
            if (postproc != "device" && postproc != "cpu" && postproc != "compare")
                throw DarknetError("postproc must be 'device', 'cpu' or 'compare', got '" + postproc + "'");
            // per image, one row per (box, class above thresh): class, confidence, left, top, width, height in pixels
            auto rows = [&](std::vector<std::vector<Detection>>& all) {
                std::vector<std::vector<DetectionRow>> r(sizes.size());
                const YoloSpec& last = n.yolo(n.yolo_layers().back()).spec;
                for (size_t b = 0; b < sizes.size(); ++b) {
                    if (nms_thresh > 0) nms(all[b], nms_thresh, last.nms_kind, last.beta_nms);
                    r[b] = detection_rows(all[b], sizes[b].first, sizes[b].second, thresh, clip);
                }
                return r;
            };
            std::vector<std::vector<DetectionRow>> result;
            {
                py::gil_scoped_release nogil;
                LayerOutputs outs = n.forward(x.data(), nchw("detect", "x", x, 0));
                std::vector<std::vector<Detection>> dev(sizes.size()), host(sizes.size());
                if (postproc != "cpu") {  // decode, threshold and compaction on the backend
                    Candidates c = yolo_candidates(n, outs, thresh);
                    for (size_t b = 0; b < sizes.size(); ++b)
                        dev[b] = get_detections(n, c, (int)b, sizes[b].first, sizes[b].second, letterbox);
                }
                if (postproc != "device") {  // the heads come down, decoded on the host
                    LayerOutputs heads = heads_on_host(n, outs);
                    for (size_t b = 0; b < sizes.size(); ++b)
                        host[b] = get_detections(n, heads, (int)b, sizes[b].first, sizes[b].second, thresh, letterbox);
                }
                result = rows(postproc == "cpu" ? host : dev);
                if (postproc == "compare") compare_detection_rows(result, rows(host));
            }
            py::list out;
            for (const auto& per : result) {
                py::list per_image;
                for (const DetectionRow& d : per) per_image.append(py::make_tuple(d.cls, d.conf, d.x, d.y, d.w, d.h));
                out.append(per_image);
            }
            return out;
        }, py::arg("x"), py::arg("sizes"), py::arg("thresh"), py::arg("nms"), py::arg("letterbox"),
           py::arg("postproc") = "device", py::arg("clip") = true,
           "postproc: 'device' (the backend decodes, only candidates come down), 'cpu' (the heads come down, "
           "decoded on the host) or 'compare' (both; DarknetError at the first difference, else the device's).");
    bind_test_devices(m);
    bind_ops(m);
    bind_distributed(m);
    bind_loader(m);
    bind_tracking(m);
}
