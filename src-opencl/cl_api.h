// The slice of the OpenCL 1.2 C API that OpenCLDevice uses, declared by hand (values from the
// Khronos cl.h) so that building needs no OpenCL SDK and the library needs no -lOpenCL: the ICD
// loader is opened at run time (cl_api.cpp) and a machine without OpenCL still loads the module.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

// Calls into the loader use the platform's OpenCL calling convention (stdcall only on 32-bit Windows).
#if defined(_WIN32)
#define DN_CL_CALL __stdcall
#else
#define DN_CL_CALL
#endif

namespace dn {

// ---- types (cl_platform.h / cl.h) ----
typedef int32_t cl_int;
typedef uint32_t cl_uint;
typedef uint64_t cl_ulong;
typedef cl_uint cl_bool;
typedef cl_ulong cl_bitfield;
typedef cl_bitfield cl_device_type;
typedef cl_bitfield cl_mem_flags;
typedef cl_bitfield cl_command_queue_properties;
typedef cl_uint cl_platform_info;
typedef cl_uint cl_device_info;
typedef cl_uint cl_program_build_info;
typedef cl_uint cl_kernel_work_group_info;
typedef intptr_t cl_context_properties;

typedef struct _cl_platform_id* cl_platform_id;
typedef struct _cl_device_id* cl_device_id;
typedef struct _cl_context* cl_context;
typedef struct _cl_command_queue* cl_command_queue;
typedef struct _cl_mem* cl_mem;
typedef struct _cl_program* cl_program;
typedef struct _cl_kernel* cl_kernel;
typedef struct _cl_event* cl_event;

// ---- constants ----
constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_BUILD_PROGRAM_FAILURE = -11;
constexpr cl_int CL_INVALID_KERNEL_NAME = -46;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;  // cl_khr_icd: the loader found no platform
constexpr cl_bool CL_FALSE = 0;
constexpr cl_bool CL_TRUE = 1;

constexpr cl_platform_info CL_PLATFORM_NAME = 0x0902;
constexpr cl_platform_info CL_PLATFORM_VENDOR = 0x0903;

constexpr cl_device_type CL_DEVICE_TYPE_CPU = 1 << 1;
constexpr cl_device_type CL_DEVICE_TYPE_GPU = 1 << 2;
constexpr cl_device_type CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;

constexpr cl_device_info CL_DEVICE_TYPE = 0x1000;
constexpr cl_device_info CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002;
constexpr cl_device_info CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004;
constexpr cl_device_info CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_device_info CL_DEVICE_NAME = 0x102B;
constexpr cl_device_info CL_DEVICE_VENDOR = 0x102C;
constexpr cl_device_info CL_DRIVER_VERSION = 0x102D;

constexpr cl_context_properties CL_CONTEXT_PLATFORM = 0x1084;
constexpr cl_mem_flags CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_program_build_info CL_PROGRAM_BUILD_LOG = 0x1183;
constexpr cl_kernel_work_group_info CL_KERNEL_WORK_GROUP_SIZE = 0x11B0;

// ---- entry points, resolved with dlsym (one pointer per function, same names as cl.h) ----
struct ClApi {
    cl_int(DN_CL_CALL* clGetPlatformIDs)(cl_uint, cl_platform_id*, cl_uint*);
    cl_int(DN_CL_CALL* clGetPlatformInfo)(cl_platform_id, cl_platform_info, size_t, void*, size_t*);
    cl_int(DN_CL_CALL* clGetDeviceIDs)(cl_platform_id, cl_device_type, cl_uint, cl_device_id*, cl_uint*);
    cl_int(DN_CL_CALL* clGetDeviceInfo)(cl_device_id, cl_device_info, size_t, void*, size_t*);
    cl_context(DN_CL_CALL* clCreateContext)(const cl_context_properties*, cl_uint, const cl_device_id*,
                                            void(DN_CL_CALL*)(const char*, const void*, size_t, void*), void*,
                                            cl_int*);
    cl_int(DN_CL_CALL* clReleaseContext)(cl_context);
    // clCreateCommandQueue is deprecated in 2.0 but every loader still exports it; we target 1.2.
    cl_command_queue(DN_CL_CALL* clCreateCommandQueue)(cl_context, cl_device_id, cl_command_queue_properties,
                                                       cl_int*);
    cl_int(DN_CL_CALL* clReleaseCommandQueue)(cl_command_queue);
    cl_mem(DN_CL_CALL* clCreateBuffer)(cl_context, cl_mem_flags, size_t, void*, cl_int*);
    cl_int(DN_CL_CALL* clReleaseMemObject)(cl_mem);
    cl_program(DN_CL_CALL* clCreateProgramWithSource)(cl_context, cl_uint, const char**, const size_t*, cl_int*);
    cl_int(DN_CL_CALL* clBuildProgram)(cl_program, cl_uint, const cl_device_id*, const char*,
                                       void(DN_CL_CALL*)(cl_program, void*), void*);
    cl_int(DN_CL_CALL* clGetProgramBuildInfo)(cl_program, cl_device_id, cl_program_build_info, size_t, void*,
                                              size_t*);
    cl_int(DN_CL_CALL* clReleaseProgram)(cl_program);
    cl_kernel(DN_CL_CALL* clCreateKernel)(cl_program, const char*, cl_int*);
    cl_int(DN_CL_CALL* clReleaseKernel)(cl_kernel);
    cl_int(DN_CL_CALL* clSetKernelArg)(cl_kernel, cl_uint, size_t, const void*);
    cl_int(DN_CL_CALL* clGetKernelWorkGroupInfo)(cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void*,
                                                 size_t*);
    cl_int(DN_CL_CALL* clEnqueueNDRangeKernel)(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*,
                                               const size_t*, cl_uint, const cl_event*, cl_event*);
    cl_int(DN_CL_CALL* clEnqueueWriteBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint,
                                             const cl_event*, cl_event*);
    cl_int(DN_CL_CALL* clEnqueueReadBuffer)(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint,
                                            const cl_event*, cl_event*);
    cl_int(DN_CL_CALL* clEnqueueCopyBuffer)(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                                            const cl_event*, cl_event*);
    cl_int(DN_CL_CALL* clFinish)(cl_command_queue);
    cl_int(DN_CL_CALL* clFlush)(cl_command_queue);
    cl_int(DN_CL_CALL* clEnqueueMarkerWithWaitList)(cl_command_queue, cl_uint, const cl_event*, cl_event*);
    cl_int(DN_CL_CALL* clReleaseEvent)(cl_event);
};

// The loaded API, or nullptr with `why` set (which libraries were tried, or which symbol is missing).
// Loads once per process; the library stays loaded. Thread-safe.
const ClApi* cl_api(std::string* why);

// "CL_OUT_OF_RESOURCES" for the common codes, "CL error -N" otherwise.
std::string cl_error_name(cl_int code);

}  // namespace dn
