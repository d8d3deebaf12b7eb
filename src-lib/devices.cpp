#include "devices.h"

#include <functional>
#include <map>
#include <mutex>

#include "errors.h"
#include "gpu/gpu_backend.h"
#include "gpu/kernel_source.h"
#include "opencl_device.h"
#ifdef DARKNET_PY_HAS_CUDA
#include "cuda_device.h"
#endif
#ifdef DARKNET_PY_METAL
#include "metal_device.h"
#endif

namespace dn {

namespace {

// Parses "kind" or "kind:N" (N >= 0); false when name is not of that kind.
bool parse_indexed(const std::string& name, const std::string& kind, int* index) {
    if (name == kind) return *index = 0, true;
    if (name.compare(0, kind.size() + 1, kind + ":") != 0) return false;
    std::string rest = name.substr(kind.size() + 1);
    if (rest.empty() || rest.size() > 6 || rest.find_first_not_of("0123456789") != std::string::npos)
        throw DarknetError("device '" + name + "': expected " + kind + " or " + kind + ":N with N a device number");
    *index = std::stoi(rest);
    return true;
}

// An opened device is shared by every backend on it (its kernels compile or load once; CUDA's pool
// and stream are one) and closed when the last tensor and backend on it are gone. Keyed by device id.
std::shared_ptr<Device> shared_device(const std::string& id, const std::function<std::shared_ptr<Device>()>& open) {
    static std::mutex mutex;
    static std::map<std::string, std::weak_ptr<Device>> opened;
    std::lock_guard<std::mutex> lock(mutex);
    if (auto d = opened[id].lock()) return d;
    auto d = open();
    opened[id] = d;
    return d;
}

std::shared_ptr<Device> opencl_device(int index) {
    return shared_device("opencl:" + std::to_string(index), [index] {
        size_t prelude_lines = 0;
        std::string source = kernel_source("opencl", &prelude_lines);
        return open_opencl_device(index, source, prelude_lines);
    });
}

std::shared_ptr<Device> cuda_device(int index) {
#ifdef DARKNET_PY_HAS_CUDA
    return shared_device("cuda:" + std::to_string(index), [index] { return open_cuda_device(index); });
#else
    throw DarknetError("device 'cuda:" + std::to_string(index) +
                       "' is not built into this module (it was built without a CUDA toolkit; darknet_py info says more)");
#endif
}

#ifdef DARKNET_PY_METAL
// The MSL (its prelude, then the kernel text) compiles once.
std::shared_ptr<Device> metal_device() {
    return shared_device("metal", [] { return open_metal_device(kernel_source("metal")); });
}
#endif

// Allocates, runs one kernel and reads it back: a device that fails this is not used by "auto".
bool works(Backend& be, std::string* why) {
    try {
        Tensor t = be.alloc(Shape{1, 1, 1, 37});
        be.fill(t, 0.5f);
        Tensor h = to_host(t);
        for (size_t i = 0; i < h.size(); ++i)
            if (h.data()[i] != 0.5f) return *why = "a test kernel returned wrong values", false;
        return true;
    } catch (const std::exception& e) {
        *why = e.what();
        return false;
    }
}

}  // namespace

// In the order "auto" tries them: CUDA, Metal, then OpenCL.
std::vector<DeviceReport> list_devices() {
    std::vector<DeviceReport> out;
#ifdef DARKNET_PY_HAS_CUDA
    std::string why_cuda;
    auto cuda = list_cuda_devices(&why_cuda);
    for (auto& info : cuda) out.push_back(DeviceReport{"cuda", true, info, ""});
    if (cuda.empty()) out.push_back(DeviceReport{"cuda", false, {}, why_cuda});
#else
    out.push_back(DeviceReport{"cuda", false, {}, "not built into this module (no CUDA toolkit was found at build time)"});
#endif
    std::string why;
    // listed before OpenCL: "auto" tries devices in this order (on a Mac, Metal before Apple's OpenCL)
#ifdef DARKNET_PY_METAL
    DeviceInfo metal;
    std::string metal_why;
    if (probe_system_metal(&metal, &metal_why)) out.push_back(DeviceReport{"metal", true, metal, ""});
    else out.push_back(DeviceReport{"metal", false, {}, metal_why});
#else
    out.push_back(DeviceReport{"metal", false, {}, "not built into this module (it is built on macOS with Metal)"});
#endif
    auto cl = list_opencl_devices(&why);
    for (auto& info : cl) out.push_back(DeviceReport{"opencl", true, info, ""});
    if (cl.empty()) out.push_back(DeviceReport{"opencl", false, {}, why});
    return out;
}

std::vector<std::string> backend_names() {
    std::vector<std::string> names{"reference", "cpu"};
    for (const DeviceReport& r : list_devices())
        if (r.found) names.push_back(r.info.id);
    return names;
}

std::string resolve_device(const std::string& name, std::vector<std::string>* log) {
    if (name != "auto") return name;
    for (const DeviceReport& r : list_devices()) {
        if (!r.found) continue;
        if (!r.info.is_gpu) {
            if (log) log->push_back(r.info.id + " (" + r.info.name + ") skipped: not a GPU");
            continue;
        }
        std::string why;
        try {
            auto be = make_backend(r.info.id);
            if (works(*be, &why)) return r.info.id;
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (log) log->push_back(r.info.id + " (" + r.info.name + ") skipped: " + why);
    }
    return "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& requested) {
    std::string name = resolve_device(requested, nullptr);
    if (name == "reference") return make_reference_backend();
    if (name == "cpu") return make_cpu_backend();
    int index = 0;
    if (parse_indexed(name, "opencl", &index)) return std::make_unique<GpuBackend>(opencl_device(index));
    if (parse_indexed(name, "cuda", &index)) return std::make_unique<GpuBackend>(cuda_device(index));
#ifdef DARKNET_PY_METAL
    if (name == "metal") return std::make_unique<GpuBackend>(metal_device());
#endif
    if (name == "metal")
        throw DarknetError("device '" + name + "' is not built into this module (darknet_py info lists what is)");
    throw DarknetError("unknown device '" + name + "' (cpu, reference, opencl, opencl:N, cuda, cuda:N, metal, auto)");
}

}  // namespace dn
