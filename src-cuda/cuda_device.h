// The CUDA backend's Device (gpu/device.h): CUDA runtime API, the kernel text compiled by nvcc at
// build time (cmake/cuda.cmake), cuBLAS for GEMM, a caching allocator, CUDA graphs for recording.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"

namespace dn {

// Every CUDA device, ids "cuda:N"; empty with `why_none` set when there is none (no driver, no GPU).
std::vector<DeviceInfo> list_cuda_devices(std::string* why_none);

// Opens device `index` (throws DarknetError when it does not exist or the kernels fail to load).
std::shared_ptr<Device> open_cuda_device(int index);

// The stream d's work runs on, as a cudaStream_t (NCCL queues its reductions after that work), or
// null when d is not a CUDA device.
void* cuda_compute_stream(const Device* d);

// The fatbin nvcc made from the kernel text (cuda_kernels_blob.cpp).
const void* cuda_kernels_fatbin();

}  // namespace dn
