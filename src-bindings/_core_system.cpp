// The module's functions about the machine and the engine rather than a network: the devices found and
// what "auto" resolves to, the host's half conversions, the kernel text, the selftest report's path and
// fast paths, CPU threads and kernel copies, and how the module was built.
#include <cstdlib>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "arg_checks.h"
#include "backend.h"
#include "bindings.h"
#include "cpu/cpu_isa.h"
#include "cpu/thread_pool.h"
#include "devices.h"
#include "gpu/kernel_source.h"
#include "half_convert.h"
#include "selftest_results.h"

using namespace dn;
using namespace dn_py;

void bind_system(py::module_& m) {
    m.def("backends", &backend_names, "reference, cpu and the id of every device found (opencl:0, ...).");
    m.def("devices", [] {
        py::list out;
        for (const DeviceReport& r : list_devices()) {
            py::dict d;
            d["kind"] = r.kind;
            d["found"] = r.found;
            d["id"] = r.info.id;
            d["name"] = r.info.name;
            d["vendor"] = r.info.vendor;
            d["driver"] = r.info.driver;
            d["memory_bytes"] = r.info.memory_bytes;
            d["compute_units"] = r.info.compute_units;
            d["is_gpu"] = r.info.is_gpu;
            d["details"] = r.info.details;
            d["why"] = r.why;
            out.append(d);
        }
        return out;
    }, "Every GPU device found (and, for a kind with none, why).");
    m.def("resolve_device", [](const std::string& name) {
        std::vector<std::string> log;
        std::string resolved;
        {
            py::gil_scoped_release nogil;
            resolved = resolve_device(name, &log);
        }
        return py::make_tuple(resolved, log);
    }, "The device 'auto' stands for, and one line per device skipped (and why).");
    m.def("half_bits", [](const py::array_t<float, py::array::c_style | py::array::forcecast>& a, const std::string& precision) {
        DType t = parse_dtype(precision);
        if (t == DType::f32) throw DarknetError("half_bits: precision must be fp16 or bf16");
        py::array_t<uint16_t> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
        f32_to_half(a.data(), out.mutable_data(), (size_t)a.size(), t == DType::bf16);
        return out;
    }, py::arg("values"), py::arg("precision"),
       "The engine's host conversion of float32 values to fp16 / bf16 bits (round to nearest even), as uint16.");
    m.def("half_values", [](const py::array_t<uint16_t, py::array::c_style | py::array::forcecast>& a, const std::string& precision) {
        DType t = parse_dtype(precision);
        if (t == DType::f32) throw DarknetError("half_values: precision must be fp16 or bf16");
        py::array_t<float> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
        half_to_f32(a.data(), out.mutable_data(), (size_t)a.size(), t == DType::bf16);
        return out;
    }, py::arg("bits"), py::arg("precision"), "fp16 / bf16 bits (uint16) back to float32, exactly.");
    m.def("kernel_source", [](const std::string& device) { return kernel_source(device); }, py::arg("device"),
          "The GPU kernel text exactly as `device` ('opencl', 'metal') compiles it: its macro prelude, then the "
          "kernels.");
    m.def("selftest_results_path", &selftest_results_path, py::arg("device"),
          "Where `darknet_py selftest --device DEVICE` writes its JSON results (selftest_results.h).");
    m.def("selftest_fast_paths", [](const std::string& device) {
        std::string why;
        auto paths = selftest_fast_paths(device, &why);
        return py::make_tuple(paths, why);
    }, py::arg("device"), "The fast paths the devices read back from that file (name -> passed), and why it "
                          "is empty when it is.");
    m.def("system_version", &system_version, "This machine's system as a selftest report records it "
          "(\"macOS 14.5 (23F79)\"; selftest_results.h).");
    m.def("engine_version", &engine_version, "The engine's version as a selftest report is checked against.");
    m.def("set_threads", [](int n) {
        check_range("set_threads", "n", n, 1, 1024);
        ThreadPool::instance().set_threads(n);
    }, "Set the CPU thread count.");
    m.def("get_threads", [] { return ThreadPool::instance().threads(); });
    m.def("cpu_isa", [] {
        py::dict d;
        d["built"] = cpu_isa_built();
        d["runnable"] = cpu_isa_runnable();
        const char* env = std::getenv("DARKNET_PY_ISA");
        d["forced"] = env && *env ? py::cast(std::string(env)) : py::none();
        try {
            const CpuIsaKernels& k = cpu_isa();
            d["active"] = std::string(k.name);
            d["sgemm_kernel"] = std::string(k.sgemm_kernel);
            d["error"] = py::none();
        } catch (const DarknetError& e) {
            d["active"] = py::none();
            d["sgemm_kernel"] = py::none();
            d["error"] = std::string(e.what());
        }
        return d;
    }, "The CPU kernel copy in use (chosen once: DARKNET_PY_ISA, else the widest this CPU runs), those built in, "
       "those this CPU runs, and the error when DARKNET_PY_ISA asks for one that cannot run.");
    m.def("build_info", [] {
        py::dict d;
#if defined(__clang__)
        d["compiler"] = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
        d["compiler"] = std::string("gcc ") + __VERSION__;
#else
        d["compiler"] = std::string("unknown");
#endif
#if defined(__APPLE__) && defined(DARKNET_PY_ACCELERATE)
        d["blas"] = std::string("Apple Accelerate (cblas_sgemm)");
#else
        d["blas"] = std::string("built-in packed SGEMM");
#endif
        d["cpu_isas"] = cpu_isa_built();
        d["native_build"] =
#ifdef DARKNET_PY_NATIVE
            true;
#else
            false;
#endif
        d["backends"] = backend_names();
        d["metal"] = false;
#ifdef DARKNET_PY_HAS_CUDA
        d["cuda"] = true;
#else
        d["cuda"] = false;
#endif
        return d;
    });
}
