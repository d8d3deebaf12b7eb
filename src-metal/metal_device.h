// MetalDevice: the Device (gpu/device.h) of Apple GPUs, in plain C++ over MetalApi (metal_api.h).
// It compiles the MSL text once, caches pipelines by name, encodes launches, copies and MPS work into
// command buffers committed about once per layer (metal_plan.h) and waited on only when the host
// needs data, and offers the MPS fast paths that passed `darknet_py selftest` (metal_fast_paths.h).
// On a Mac, metal_objc.mm provides the MetalApi; on Linux the tests drive it with FakeMetalApi.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "metal_api.h"

namespace dn {

// A Metal device over `api`: compiles `msl` (throws DarknetError with Metal's message when it does
// not compile) and uses the MPS paths choose_mps_paths(selftest_env, mps_env, its GPU) enables (the values of
// DARKNET_PY_SELFTEST and DARKNET_PY_MPS, null when unset). `notes` (optional) receives each fallback
// line the device prints once on stderr (the tests read them).
//
// An MPS path that fails at run time (MPS raised, or its command buffer failed on the GPU) is switched
// off and counted (Device::fast_path_failures). Where the op's data is intact the op runs on our kernels at
// once; where it is not (a failure found at a later wait: the work is lost, and later work may have
// overwritten the inputs) that wait throws DarknetError naming the failure and the MPS work lost.
// While the selftest judges the paths (selftest_env "1") every such failure is thrown, so that the
// selftest reports it for the op instead of judging our kernels in the path's place.
std::shared_ptr<Device> make_metal_device(std::unique_ptr<MetalApi> api, const std::string& msl,
                                          const char* selftest_env, const char* mps_env,
                                          std::shared_ptr<std::vector<std::string>> notes = nullptr);

#ifdef DARKNET_PY_METAL
// The system's default Metal device (metal_objc.mm); null with the reason when there is none.
std::unique_ptr<MetalApi> open_system_metal_api(std::string* why);
// Its DeviceInfo without compiling anything (`darknet_py info`); false with the reason.
bool probe_system_metal(DeviceInfo* info, std::string* why);
// The system device, its MPS paths and switches from the environment.
std::shared_ptr<Device> open_metal_device(const std::string& msl);
#endif

}  // namespace dn
