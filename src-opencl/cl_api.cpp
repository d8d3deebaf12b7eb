// Opens the OpenCL ICD loader at run time and resolves the entry points of cl_api.h.
#include "cl_api.h"

#include <cstdlib>
#include <vector>

#if !defined(_WIN32)
#include <dlfcn.h>
#endif

namespace dn {
namespace {

// Every function of ClApi, for resolving them all the same way.
#define DN_CL_FUNCTIONS(X)                                                                                        \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext)               \
    X(clReleaseContext) X(clCreateCommandQueue) X(clReleaseCommandQueue) X(clCreateBuffer) X(clReleaseMemObject)  \
    X(clCreateProgramWithSource) X(clBuildProgram) X(clGetProgramBuildInfo) X(clReleaseProgram) X(clCreateKernel) \
    X(clReleaseKernel) X(clSetKernelArg) X(clGetKernelWorkGroupInfo) X(clEnqueueNDRangeKernel)                    \
    X(clEnqueueWriteBuffer) X(clEnqueueReadBuffer) X(clEnqueueCopyBuffer) X(clFinish) X(clFlush)                  \
    X(clEnqueueMarkerWithWaitList) X(clReleaseEvent)

struct Loaded {
    ClApi api{};
    bool ok = false;
    std::string why;
};

#if defined(_WIN32)
Loaded load() {
    Loaded r;
    r.why = "the OpenCL backend is not supported on Windows";
    return r;
}
#else
// Search order: an explicit path from the environment (the Python package points it at pyopencl's
// bundled loader when the system has none), then the system loader, then macOS's framework.
Loaded load() {
    Loaded r;
    std::vector<std::string> names;
    const char* env = std::getenv("DARKNET_PY_OPENCL_LIBRARY");
    if (env && *env) names.push_back(env);
    names.push_back("libOpenCL.so.1");
    names.push_back("libOpenCL.so");
#if defined(__APPLE__)
    names.push_back("/System/Library/Frameworks/OpenCL.framework/OpenCL");
#endif
    void* handle = nullptr;
    std::string tried, env_error;
    for (const std::string& n : names) {
        // RTLD_LOCAL: our symbols never leak into other libraries loaded later (e.g. a CUDA backend).
        handle = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle) break;
        const char* e = dlerror();
        if (env && n == env && e) env_error = e;
        tried += (tried.empty() ? "" : ", ") + n;
    }
    if (!handle) {
        r.why = "no OpenCL loader library found (tried " + tried + ")";
        // The user named this one explicitly, so say why it failed.
        if (!env_error.empty()) r.why += "; DARKNET_PY_OPENCL_LIBRARY: " + env_error;
        return r;
    }
#define DN_CL_RESOLVE(name)                                                                  \
    r.api.name = reinterpret_cast<decltype(r.api.name)>(dlsym(handle, #name));              \
    if (!r.api.name) {                                                                       \
        r.why = "the OpenCL library has no " #name " (not an OpenCL 1.2 loader?)";           \
        return r;                                                                            \
    }
    DN_CL_FUNCTIONS(DN_CL_RESOLVE)
#undef DN_CL_RESOLVE
    // The handle is never closed: drivers keep threads and atexit hooks that must outlive us.
    r.ok = true;
    return r;
}
#endif

}  // namespace

const ClApi* cl_api(std::string* why) {
    static const Loaded loaded = load();  // C++11 statics: loaded once, thread-safe
    if (!loaded.ok && why) *why = loaded.why;
    return loaded.ok ? &loaded.api : nullptr;
}

std::string cl_error_name(cl_int code) {
    switch (code) {
#define DN_CL_ERR(name, value) \
    case value: return #name;
        DN_CL_ERR(CL_DEVICE_NOT_FOUND, -1)
        DN_CL_ERR(CL_DEVICE_NOT_AVAILABLE, -2)
        DN_CL_ERR(CL_COMPILER_NOT_AVAILABLE, -3)
        DN_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4)
        DN_CL_ERR(CL_OUT_OF_RESOURCES, -5)
        DN_CL_ERR(CL_OUT_OF_HOST_MEMORY, -6)
        DN_CL_ERR(CL_MEM_COPY_OVERLAP, -8)
        DN_CL_ERR(CL_BUILD_PROGRAM_FAILURE, -11)
        DN_CL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13)
        DN_CL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14)
        DN_CL_ERR(CL_INVALID_VALUE, -30)
        DN_CL_ERR(CL_INVALID_DEVICE_TYPE, -31)
        DN_CL_ERR(CL_INVALID_PLATFORM, -32)
        DN_CL_ERR(CL_INVALID_DEVICE, -33)
        DN_CL_ERR(CL_INVALID_CONTEXT, -34)
        DN_CL_ERR(CL_INVALID_QUEUE_PROPERTIES, -35)
        DN_CL_ERR(CL_INVALID_COMMAND_QUEUE, -36)
        DN_CL_ERR(CL_INVALID_HOST_PTR, -37)
        DN_CL_ERR(CL_INVALID_MEM_OBJECT, -38)
        DN_CL_ERR(CL_INVALID_BUILD_OPTIONS, -43)
        DN_CL_ERR(CL_INVALID_PROGRAM, -44)
        DN_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE, -45)
        DN_CL_ERR(CL_INVALID_KERNEL_NAME, -46)
        DN_CL_ERR(CL_INVALID_KERNEL_DEFINITION, -47)
        DN_CL_ERR(CL_INVALID_KERNEL, -48)
        DN_CL_ERR(CL_INVALID_ARG_INDEX, -49)
        DN_CL_ERR(CL_INVALID_ARG_VALUE, -50)
        DN_CL_ERR(CL_INVALID_ARG_SIZE, -51)
        DN_CL_ERR(CL_INVALID_KERNEL_ARGS, -52)
        DN_CL_ERR(CL_INVALID_WORK_DIMENSION, -53)
        DN_CL_ERR(CL_INVALID_WORK_GROUP_SIZE, -54)
        DN_CL_ERR(CL_INVALID_WORK_ITEM_SIZE, -55)
        DN_CL_ERR(CL_INVALID_GLOBAL_OFFSET, -56)
        DN_CL_ERR(CL_INVALID_EVENT_WAIT_LIST, -57)
        DN_CL_ERR(CL_INVALID_OPERATION, -59)
        DN_CL_ERR(CL_INVALID_BUFFER_SIZE, -61)
        DN_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE, -63)
        DN_CL_ERR(CL_PLATFORM_NOT_FOUND_KHR, -1001)
#undef DN_CL_ERR
        default: return "CL error " + std::to_string(code);
    }
}

}  // namespace dn
