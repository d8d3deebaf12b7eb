// OpenCLDevice: the thin Device of the OpenCL backend (one context, one in-order queue, one
// program built from the embedded kernel text). Everything above it lives in GpuBackend.
#include "opencl_device.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "cl_api.h"
#include "errors.h"

namespace dn {
namespace {

// DeviceMemory is only forward-declared (gpu/device.h) and every backend (CUDA, Metal, OpenCL) is
// linked into the same library, so defining `struct DeviceMemory` here would clash with their
// definitions (ODR). An allocation therefore *is* its cl_mem handle, cast to and from the opaque type.
DeviceMemory* to_memory(cl_mem m) { return reinterpret_cast<DeviceMemory*>(m); }
cl_mem to_cl(const DeviceMemory* m) { return reinterpret_cast<cl_mem>(const_cast<DeviceMemory*>(m)); }

// Info strings come NUL-terminated and sometimes padded with spaces (some drivers do).
std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\0' || s.back() == ' ' || s.back() == '\n')) s.pop_back();
    size_t start = s.find_first_not_of(' ');
    return start == std::string::npos ? std::string() : s.substr(start);
}

std::string device_string(const ClApi& cl, cl_device_id d, cl_device_info what) {
    size_t n = 0;
    if (cl.clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
    std::string s(n, '\0');
    if (cl.clGetDeviceInfo(d, what, n, &s[0], nullptr) != CL_SUCCESS) return "";
    return trimmed(s);
}

std::string platform_string(const ClApi& cl, cl_platform_id p, cl_platform_info what) {
    size_t n = 0;
    if (cl.clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return "";
    std::string s(n, '\0');
    if (cl.clGetPlatformInfo(p, what, n, &s[0], nullptr) != CL_SUCCESS) return "";
    return trimmed(s);
}

// A fixed-size device property, or T{} when the driver does not answer.
template <class T>
T device_value(const ClApi& cl, cl_device_id d, cl_device_info what) {
    T v{};
    if (cl.clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) != CL_SUCCESS) return T{};
    return v;
}

struct Found {
    cl_platform_id platform;
    cl_device_id device;
    DeviceInfo info;
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Every device of every platform, in order; `why` says why when there are none.
std::vector<Found> enumerate(const ClApi& cl, std::string* why) {
    std::vector<Found> found;
    cl_uint n_platforms = 0;
    cl_int err = cl.clGetPlatformIDs(0, nullptr, &n_platforms);
    if (err == CL_PLATFORM_NOT_FOUND_KHR || (err == CL_SUCCESS && n_platforms == 0)) {
        *why = "the OpenCL loader found no platforms (no ICD installed; Linux loaders read /etc/OpenCL/vendors "
               "or OCL_ICD_VENDORS)";
        return found;
    }
    if (err != CL_SUCCESS) {
        *why = "clGetPlatformIDs failed: " + cl_error_name(err);
        return found;
    }
    std::vector<cl_platform_id> platforms(n_platforms);
    cl.clGetPlatformIDs(n_platforms, platforms.data(), nullptr);
    std::string platform_names;
    for (cl_platform_id p : platforms) {
        std::string pname = platform_string(cl, p, CL_PLATFORM_NAME);
        std::string pvendor = platform_string(cl, p, CL_PLATFORM_VENDOR);
        platform_names += (platform_names.empty() ? "" : ", ") + pname;
        cl_uint n_devices = 0;
        // A platform without devices answers CL_DEVICE_NOT_FOUND: not an error for the list.
        if (cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n_devices) != CL_SUCCESS || n_devices == 0) continue;
        std::vector<cl_device_id> devices(n_devices);
        if (cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n_devices, devices.data(), nullptr) != CL_SUCCESS) continue;
        for (cl_device_id d : devices) {
            Found f{p, d, DeviceInfo{}};
            DeviceInfo& i = f.info;
            i.id = "opencl:" + std::to_string(found.size());
            i.name = device_string(cl, d, CL_DEVICE_NAME);
            i.vendor = device_string(cl, d, CL_DEVICE_VENDOR);
            i.driver = device_string(cl, d, CL_DRIVER_VERSION);
            i.memory_bytes = device_value<cl_ulong>(cl, d, CL_DEVICE_GLOBAL_MEM_SIZE);
            i.compute_units = (int)device_value<cl_uint>(cl, d, CL_DEVICE_MAX_COMPUTE_UNITS);
            // device="auto" must never pick a CPU runtime or a simulator. Oclgrind claims every
            // type bit (15), so it is recognised by name; pocl and Intel's CPU runtime set CPU.
            cl_device_type type = device_value<cl_device_type>(cl, d, CL_DEVICE_TYPE);
            bool simulator = contains(i.name, "Oclgrind") || contains(pname, "Oclgrind") || contains(pvendor, "Oclgrind");
            i.is_gpu = (type & CL_DEVICE_TYPE_GPU) && !(type & CL_DEVICE_TYPE_CPU) && !simulator;
            found.push_back(std::move(f));
        }
    }
    if (found.empty()) *why = "OpenCL platform(s) " + platform_names + " have no devices";
    return found;
}

class OpenCLDevice final : public Device {
public:
    OpenCLDevice(const ClApi& cl, const Found& f) : cl_(cl), platform_(f.platform), device_(f.device), info_(f.info) {}

    ~OpenCLDevice() override {
        // Return codes ignored: a destructor cannot report them, and the objects are gone either way.
        if (queue_) cl_.clFinish(queue_);
        for (auto& k : kernels_) cl_.clReleaseKernel(k.second);
        if (program_) cl_.clReleaseProgram(program_);
        if (read_queue_) cl_.clReleaseCommandQueue(read_queue_);
        if (queue_) cl_.clReleaseCommandQueue(queue_);
        if (context_) cl_.clReleaseContext(context_);
    }

    // Second half of construction, so that a failure here still runs the destructor (shared_ptr).
    // `prelude_lines`: how many lines come before the kernel text, for reading the build log.
    void open(const std::string& source, size_t prelude_lines) {
        cl_int err = CL_SUCCESS;
        const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform_, 0};
        context_ = cl_.clCreateContext(props, 1, &device_, nullptr, nullptr, &err);
        check(err, "clCreateContext");
        queue_ = cl_.clCreateCommandQueue(context_, device_, 0, &err);  // in order: downloads see every launch
        check(err, "clCreateCommandQueue");
        size_t max_group = 0;
        check(cl_.clGetDeviceInfo(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(max_group), &max_group, nullptr),
              "clGetDeviceInfo(CL_DEVICE_MAX_WORK_GROUP_SIZE)");
        device_max_group_ = max_group;

        const char* text = source.c_str();
        size_t length = source.size();
        program_ = cl_.clCreateProgramWithSource(context_, 1, &text, &length, &err);
        check(err, "clCreateProgramWithSource");
        // No -cl-fast-relaxed-math / -cl-mad-enable: results must match the CPU backend's within
        // the tests' tolerances, and fast math changes exp/division and denormals.
        err = cl_.clBuildProgram(program_, 1, &device_, "-cl-std=CL1.2", nullptr, nullptr);
        if (err != CL_SUCCESS)
            throw DarknetError("OpenCL kernel compile failed on " + where() + " (" + cl_error_name(err) +
                               "); build log (line numbers include the " + std::to_string(prelude_lines) +
                               "-line prelude):\n" + build_log());
    }

    const DeviceInfo& info() const override { return info_; }

    DeviceMemory* alloc(size_t bytes) override {
        // Zero-size tensors exist, and a zero-size cl_mem is CL_INVALID_BUFFER_SIZE.
        size_t n = std::max<size_t>(bytes, 4);
        cl_int err = CL_SUCCESS;
        cl_mem m = cl_.clCreateBuffer(context_, CL_MEM_READ_WRITE, n, nullptr, &err);
        if (err != CL_SUCCESS || !m)
            throw DarknetError("OpenCL: cannot allocate " + std::to_string(bytes) + " bytes on " + where() + " (" +
                               cl_error_name(err) + ")");
        return to_memory(m);
    }

    void free(DeviceMemory* m) override {
        // Called from destructors (Buffer), so it must not throw: the return code is ignored.
        if (m) cl_.clReleaseMemObject(to_cl(m));
    }

    // Zero-byte transfers are skipped: OpenCL 1.2 rejects size 0 with CL_INVALID_VALUE.
    void upload(DeviceMemory* dst, size_t offset, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        check(cl_.clEnqueueWriteBuffer(queue_, to_cl(dst), CL_TRUE, offset, bytes, src, 0, nullptr, nullptr),
              "clEnqueueWriteBuffer");
        bytes_uploaded += bytes;
    }

    void download(const DeviceMemory* src, size_t offset, void* dst, size_t bytes) override {
        if (bytes == 0) return;
        // Blocking read on an in-order queue: every kernel queued before it has finished.
        check(cl_.clEnqueueReadBuffer(queue_, to_cl(src), CL_TRUE, offset, bytes, dst, 0, nullptr, nullptr),
              "clEnqueueReadBuffer");
        bytes_downloaded += bytes;
        ++blocking_downloads;
    }

    // A mark is a marker event on queue_; the marked download is a blocking read on read_queue_ that
    // waits for that event alone, so the kernels queued on queue_ since the mark run on meanwhile.
    struct Mark final : QueueMark {
        const ClApi* cl = nullptr;
        cl_event event = nullptr;
        ~Mark() override {
            if (event) cl->clReleaseEvent(event);
        }
    };
    std::shared_ptr<QueueMark> mark_queue() override {
        auto m = std::make_shared<Mark>();
        m->cl = &cl_;
        check(cl_.clEnqueueMarkerWithWaitList(queue_, 0, nullptr, &m->event), "clEnqueueMarkerWithWaitList");
        return m;
    }
    void download_marked(const QueueMark* mark, const DeviceMemory* src, size_t offset, void* dst,
                         size_t bytes) override {
        auto* m = dynamic_cast<const Mark*>(mark);
        if (!m) return download(src, offset, dst, bytes);
        if (bytes == 0) return;
        check(cl_.clFlush(queue_), "clFlush");  // the marked work must be submitted before another queue waits on it
        std::lock_guard<std::mutex> lock(mutex_);
        cl_int err = CL_SUCCESS;
        if (!read_queue_) read_queue_ = cl_.clCreateCommandQueue(context_, device_, 0, &err);
        check(err, "clCreateCommandQueue");
        check(cl_.clEnqueueReadBuffer(read_queue_, to_cl(src), CL_TRUE, offset, bytes, dst, 1, &m->event, nullptr),
              "clEnqueueReadBuffer");
        bytes_downloaded += bytes;
    }

    void copy(const DeviceMemory* src, size_t src_offset, DeviceMemory* dst, size_t dst_offset,
              size_t bytes) override {
        if (bytes == 0) return;
        check(cl_.clEnqueueCopyBuffer(queue_, to_cl(src), to_cl(dst), src_offset, dst_offset, bytes, 0, nullptr,
                                      nullptr),
              "clEnqueueCopyBuffer");
    }

    void launch(const char* name, LaunchDims dims, const std::vector<KernelArg>& args) override {
        if (dims.groups == 0) return;
        // One device serves every network on it, maybe from several threads: a kernel's arguments
        // are state of the cl_kernel object until the launch is queued.
        std::lock_guard<std::mutex> lock(mutex_);
        cl_kernel k = kernel(name);
        for (size_t i = 0; i < args.size(); ++i) {
            const KernelArg& a = args[i];
            cl_int err;
            if (a.bytes) {
                err = cl_.clSetKernelArg(k, (cl_uint)i, a.size, a.bytes);
            } else {
                cl_mem m = to_cl(a.buffer);  // a null buffer is allowed: the kernel sees a null pointer
                err = cl_.clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &m);
            }
            check(err, "clSetKernelArg", name, (int)i);
        }
        size_t local = dims.group;
        size_t global = (size_t)dims.groups * dims.group;
        // Errors while the kernel runs surface at the next blocking call (download/synchronize).
        check(cl_.clEnqueueNDRangeKernel(queue_, k, 1, nullptr, &global, &local, 0, nullptr, nullptr),
              "clEnqueueNDRangeKernel", name);
    }

    uint32_t max_group_size(const char* name) override {
        size_t kernel_max = 0;
        std::lock_guard<std::mutex> lock(mutex_);
        check(cl_.clGetKernelWorkGroupInfo(kernel(name), device_, CL_KERNEL_WORK_GROUP_SIZE, sizeof(kernel_max),
                                           &kernel_max, nullptr),
              "clGetKernelWorkGroupInfo", name);
        return (uint32_t)std::min(kernel_max, device_max_group_);
    }

    void synchronize() override { check(cl_.clFinish(queue_), "clFinish"); }

private:
    std::string where() const { return info_.id + " (" + info_.name + ")"; }

    void check(cl_int err, const char* function, const char* kernel_name = nullptr, int arg = -1) const {
        if (err == CL_SUCCESS) return;
        std::string msg = "OpenCL " + std::string(function) + " failed: " + cl_error_name(err);
        if (kernel_name) msg += std::string(" (kernel ") + kernel_name;
        if (kernel_name && arg >= 0) msg += ", argument " + std::to_string(arg);
        if (kernel_name) msg += ")";
        throw DarknetError(msg + " on " + where());
    }

    std::string build_log() const {
        size_t n = 0;
        if (cl_.clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n == 0)
            return "(no build log)";
        std::string log(n, '\0');
        cl_.clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, n, &log[0], nullptr);
        return trimmed(log);
    }

    // Kernels are created on first use and kept: creating all of them up front costs time at open
    // for kernels a network never runs.
    cl_kernel kernel(const char* name) {
        auto it = kernels_.find(name);
        if (it != kernels_.end()) return it->second;
        cl_int err = CL_SUCCESS;
        cl_kernel k = cl_.clCreateKernel(program_, name, &err);
        if (err == CL_INVALID_KERNEL_NAME)
            throw DarknetError(std::string("OpenCL: the kernel text has no kernel named '") + name + "' (" + where() +
                               ")");
        check(err, "clCreateKernel", name);
        kernels_.emplace(name, k);
        return k;
    }

    const ClApi& cl_;
    cl_platform_id platform_;
    cl_device_id device_;
    DeviceInfo info_;
    cl_context context_ = nullptr;
    cl_command_queue queue_ = nullptr;  // in-order, no profiling
    cl_command_queue read_queue_ = nullptr;  // download_marked's, made on first use
    std::mutex mutex_;                  // launches and the kernel cache
    cl_program program_ = nullptr;
    size_t device_max_group_ = 0;
    std::unordered_map<std::string, cl_kernel> kernels_;
};

}  // namespace

std::vector<DeviceInfo> list_opencl_devices(std::string* why_none) {
    std::vector<DeviceInfo> out;
    std::string why;
    try {
        if (const ClApi* cl = cl_api(&why))
            for (Found& f : enumerate(*cl, &why)) out.push_back(std::move(f.info));
    } catch (const std::exception& e) {  // only bad_alloc can get here; the promise is "never throws"
        why = std::string("listing OpenCL devices failed: ") + e.what();
        out.clear();
    }
    if (out.empty() && why_none) *why_none = why;
    return out;
}

std::shared_ptr<Device> open_opencl_device(int index, const std::string& source, size_t prelude_lines) {
    std::string why;
    const ClApi* cl = cl_api(&why);
    if (!cl) throw DarknetError("OpenCL is not available: " + why);
    std::vector<Found> found = enumerate(*cl, &why);
    if (found.empty()) throw DarknetError("no OpenCL devices: " + why);
    if (index < 0 || index >= (int)found.size())
        throw DarknetError("no OpenCL device opencl:" + std::to_string(index) + " (found opencl:0 to opencl:" +
                           std::to_string(found.size() - 1) + ")");
    auto device = std::make_shared<OpenCLDevice>(*cl, found[index]);
    device->open(source, prelude_lines);
    return device;
}

}  // namespace dn
