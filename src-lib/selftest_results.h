// What `darknet_py selftest` leaves behind for the devices (python/darknet_py/diagnostics/selftest.py writes it):
// a JSON file per device in the user's cache folder. A device with vendor fast paths (MPS, cuBLAS,
// cuDNN) enables only those whose parity check passed on this machine, read back through here.
// The file's other keys (ops, training, ...) are for people; the engine reads only "fast_paths":
//   {"device": "metal", ..., "fast_paths": {"mps_gemm": true, "mps_conv2d": false}}
#pragma once
#include <map>
#include <string>

namespace dn {

// The folder: $DARKNET_PY_CACHE_DIR if set, else $XDG_CACHE_HOME/darknet_py, else
// ~/Library/Caches/darknet_py on macOS and ~/.cache/darknet_py elsewhere.
std::string cache_dir();

// cache_dir()/selftest-<device>.json, ':' in the device name written as '-' ("opencl-0").
std::string selftest_results_path(const std::string& device);

// The "fast_paths" object of that file: name -> passed. Empty when the file is missing or cannot be
// read as such (`why`, if non-null, then says what was wrong); never throws.
std::map<std::string, bool> selftest_fast_paths(const std::string& device, std::string* why = nullptr);

// What a selftest verdict is about: the system, the GPU and the engine that ran it. The report
// records all three ("system", "device_name", "darknet_py"); a device trusts only a report of its own.
struct SelftestIdentity {
    std::string system, device_name, darknet_py;
};
// This machine's system: "macOS 14.5 (23F79)" on macOS (sysctl kern.osproductversion, kern.osversion),
// "<sysname> <release> (<version>)" from uname elsewhere.
std::string system_version();
// The engine's version (the package's, from the build), "unknown" in a build without it.
std::string engine_version();
// This system and engine with GPU `device_name`.
SelftestIdentity this_identity(const std::string& device_name);

// selftest_fast_paths, and empty with `why` saying what differs when the file's identity is not
// `expect`'s (a verdict of another macOS, GPU or darknet_py means nothing here).
std::map<std::string, bool> selftest_fast_paths(const std::string& device, const SelftestIdentity& expect,
                                                std::string* why);

// True only when the selftest ran on this device and fast path `name` passed there.
bool fast_path_passed(const std::string& device, const std::string& name);

}  // namespace dn
