// The text a GPU device compiles: its macro prelude (kernels/compat_<device>.h) followed by the kernel
// text (kernels/*.h, flattened into the module by cmake/embed_kernels.cmake). Composed here, once, so
// that the OpenCL and Metal devices compile and `darknet_py.metal_source()` shows the same text.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace dn {

// The full source for `device` ("opencl", "metal"); `prelude_lines` (if non-null) gets the number of
// lines before the kernel text, for reading compiler messages. Throws DarknetError for another name.
std::string kernel_source(const std::string& device, size_t* prelude_lines = nullptr);

// The device names kernel_source knows.
std::vector<std::string> kernel_source_devices();

}  // namespace dn
