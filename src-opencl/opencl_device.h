// The OpenCL backend's Device (gpu/device.h): OpenCL 1.2 through the ICD loader opened at run
// time (cl_api.h), so the library builds and loads on machines without OpenCL.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"

namespace dn {

// Every OpenCL device found, in platform order; ids are "opencl:N" with N the index in this list.
// `why_none` (if non-null) gets a one-line reason when the list is empty (no loader library found
// and where it looked, no platforms, ...). Never throws.
std::vector<DeviceInfo> list_opencl_devices(std::string* why_none);

// Opens device `index` of that list and compiles `source` (gpu/kernel_source.h: the prelude of
// kernels/compat_opencl.h, `prelude_lines` long, then the kernel text) for OpenCL C 1.2. Throws
// DarknetError when the device does not exist or cannot be opened, and with the build log on a
// compile error.
std::shared_ptr<Device> open_opencl_device(int index, const std::string& source, size_t prelude_lines);

}  // namespace dn
