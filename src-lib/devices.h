// Which backends and devices exist, and how a name ("cpu", "opencl:1", "auto", ...) becomes one.
// Device names: cpu, reference (the naive oracle), opencl[:N] (any OpenCL runtime), and cuda[:N] /
// metal once those devices are built in. "auto" takes cuda, then metal, then an OpenCL GPU (never
// a CPU runtime or simulator), then cpu, each only after a tiny functional check passes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "gpu/device.h"

namespace dn {

// One device as `darknet_py info` lists it; `why` says why an expected kind is missing or unusable.
struct DeviceReport {
    std::string kind;  // "opencl", "cuda", "metal"
    bool found = false;
    DeviceInfo info;
    std::string why;
};

std::vector<DeviceReport> list_devices();

// reference, cpu, then the id of every device found ("opencl:0", ...).
std::vector<std::string> backend_names();

// "auto" resolved to a concrete name; `log` (if non-null) gets one line per device skipped and why.
std::string resolve_device(const std::string& name, std::vector<std::string>* log);

// The backend for a device name (after resolving "auto"); throws DarknetError for an unknown or
// unusable name, saying which names exist.
std::unique_ptr<Backend> make_backend(const std::string& name);

}  // namespace dn
