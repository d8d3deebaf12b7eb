// Bindings of the collective layer (src-lib/distributed, src-cuda/nccl_*): the collectives, and
// a network's bucketed gradient reduction. darknet_py/distributed/ builds on them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <chrono>

#include "backend.h"
#include "bindings.h"
#include "devices.h"
#include "distributed/gradient_reducer.h"
#include "distributed/tcp_ring.h"
#include "network.h"
#ifdef DARKNET_PY_HAS_CUDA
#include "nccl_collective.h"
#endif

using namespace dn;
using namespace dn_py;

void bind_distributed(py::module_& m) {
    py::register_exception<CollectiveError>(m, "CollectiveError", PyExc_RuntimeError);

    py::class_<Collective, std::shared_ptr<Collective>>(m, "Collective")
        .def_property_readonly("rank", &Collective::rank)
        .def_property_readonly("size", &Collective::size)
        .def_property_readonly("name", [](const Collective& c) { return std::string(c.name()); })
        .def("all_reduce", [](Collective& c, FloatArray a) {
            py::array_t<float> out(a.request().shape);
            std::copy(a.data(), a.data() + a.size(), out.mutable_data());
            py::gil_scoped_release nogil;
            c.all_reduce_sum(out.mutable_data(), (size_t)out.size());
            return out;
        }, py::arg("values"), "The element-wise sum over the ranks of `values` (a new float32 array).")
        .def("broadcast_params", [](Collective& c, Network& net, int root) {
            std::lock_guard<std::mutex> lk(net.call_mutex);
            py::gil_scoped_release nogil;
            net.own_params();
            std::vector<Tensor> values;
            for (auto& l : net.layers)
                for (Param& p : l->params) values.push_back(p.value);
            c.broadcast(values, root);
        }, py::arg("net"), py::arg("root") = 0,
           "Gives every rank rank `root`'s parameter values (batchnorm's rolling statistics included).");

    m.def("all_reduce_bench", [](Collective& c, const std::string& device, double mib, int iterations) {
        if (!(mib > 0) || iterations < 1) throw DarknetError("all_reduce_bench: mib > 0 and iterations >= 1");
        py::gil_scoped_release nogil;
        auto backend = make_backend(device);
        Tensor t = backend->alloc(Shape{1, 1, 1, (int)(mib * (1 << 20) / sizeof(float))});
        backend->fill(t, 1.0f);
        std::vector<Tensor> ts{t};
        auto sync = [&] {
            c.wait();
            if (auto dev = backend->device()) dev->synchronize();
        };
        c.all_reduce_sum(ts);  // warm-up (NCCL sets up its channels)
        sync();
        std::vector<double> times;
        for (int i = 0; i < iterations; ++i) {
            auto t0 = std::chrono::steady_clock::now();
            c.all_reduce_sum(ts);
            sync();
            times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(times.begin(), times.end());
        return times[times.size() / 2];
    }, py::arg("collective"), py::arg("device"), py::arg("mib"), py::arg("iterations") = 10,
       "Median seconds of one all-reduce of `mib` MiB of floats in `device`'s memory (every rank calls it).");

    m.def("tcp_collective", [](int rank, int size, int send_fd, int recv_fd, double timeout_s) {
        return std::shared_ptr<Collective>(
            std::make_shared<TcpRingCollective>(rank, size, send_fd, recv_fd, (int)(timeout_s * 1000)));
    }, py::arg("rank"), py::arg("size"), py::arg("send_fd"), py::arg("recv_fd"), py::arg("timeout_s"),
       "The ring all-reduce over TCP: send_fd connected to rank + 1, recv_fd to rank - 1 (both duplicated "
       "file descriptors it then owns).");

    m.def("nccl_status", [] {
#ifdef DARKNET_PY_HAS_CUDA
        std::string why, version;
        bool ok = nccl_available(&why, &version);
        return py::make_tuple(ok, ok ? version : why);
#else
        return py::make_tuple(false, std::string("this build has no CUDA"));
#endif
    }, "(True, NCCL's version and library) or (False, why NCCL cannot be used).");
    m.def("nccl_unique_id", [] {
#ifdef DARKNET_PY_HAS_CUDA
        std::string id = nccl_unique_id();
        return py::bytes(id);
#else
        throw DarknetError("NCCL: this build has no CUDA");
        return py::bytes();
#endif
    }, "A new NCCL unique id (rank 0 makes it and the rendezvous hands it to the others).");
    m.def("nccl_collective", [](int rank, int size, const std::string& unique_id, const std::string& device,
                                double timeout_s) {
#ifdef DARKNET_PY_HAS_CUDA
        py::gil_scoped_release nogil;
        return make_nccl_collective(rank, size, unique_id, device, timeout_s);
#else
        (void)rank, (void)size, (void)unique_id, (void)device, (void)timeout_s;
        throw DarknetError("NCCL: this build has no CUDA");
        return std::shared_ptr<Collective>();
#endif
    }, py::arg("rank"), py::arg("size"), py::arg("unique_id"), py::arg("device"), py::arg("timeout_s"));

    m.def("set_collective", [](Network& net, std::shared_ptr<Collective> c, double bucket_mb) {
        std::lock_guard<std::mutex> lk(net.call_mutex);
        if (!c) {
            net.gradient_hook.reset();
            return;
        }
        if (!(bucket_mb > 0)) throw DarknetError("set_collective: bucket_mb must be positive");
        net.gradient_hook = std::make_shared<GradientReducer>(net, c, (size_t)(bucket_mb * (1 << 20)));
    }, py::arg("net"), py::arg("collective"), py::arg("bucket_mb") = 4.0,
       "Data-parallel training: backward(all_reduce=True) sums the gradients over the ranks in buckets of "
       "about bucket_mb MiB that start while the backward runs; update() waits for them. None detaches. "
       "(4 MiB: yolov4-tiny's 23 MiB of gradients in 6 buckets, so that most start before the backward ends.)");
    m.def("finish_gradient_reduction", [](Network& net) {
        std::lock_guard<std::mutex> lk(net.call_mutex);
        py::gil_scoped_release nogil;
        if (net.gradient_hook) net.gradient_hook->finish();
    }, "Waits until the gradients of the last backward(all_reduce=True) are summed over the ranks (update() "
       "does it too); call it before any other collective operation, which must not overlap the reduction.");
    m.def("reduce_stats", [](Network& net) {
        std::lock_guard<std::mutex> lk(net.call_mutex);
        auto* r = dynamic_cast<GradientReducer*>(net.gradient_hook.get());
        if (!r) throw DarknetError("reduce_stats: the network has no collective (set_collective)");
        const auto& s = r->last_stats();
        py::dict d;
        d["buckets"] = s.buckets;
        d["launched_early"] = s.launched_early;
        d["bytes"] = s.bytes;
        d["reduce_seconds"] = s.reduce_seconds;
        d["exposed_seconds"] = s.exposed_seconds;
        return d;
    }, "The last iteration's reduction: buckets, those launched while the backward still had earlier layers to "
       "run (launched_early), bytes, seconds reducing, and seconds update() waited for it.");
}
