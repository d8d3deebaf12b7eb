// Test-only devices, for the Linux tests of GPU code that has no hardware here (src-test/
// test_metal_device.py, test_gpu_fast_paths.py). Each is a Device that _core.Ops(device) runs
// every op of the contract on:
//   _core.fake_metal_device(...)   MetalDevice over FakeMetalApi: the Metal device's C++ with a fake
//                                  of its Objective-C++ file; the fake records every call it gets, and
//                                  fail_next plants MPS failures.
//   _core.HostMemoryPool(capacity)  the CUDA device's caching pool over host malloc with a capacity
//                                  (what cudaMalloc would refuse), for src-test/test_memory_pool.py.
//   _core.kernel_counting_device(id) an OpenCL device that counts its kernel launches by name and
//                                  its data-parallel choice agreements (test_batchnorm_activate.py,
//                                  test_distributed.py).
//   _core.host_fast_path_device(id) an OpenCL device that also claims every vendor fast path
//                                  (convolution, pooling, batchnorm) and computes it on the host
//                                  with the CPU backend: proves GpuBackend's fast-path plumbing.
//   _core.upload_ahead_device(id)   an OpenCL device that offers upload_ahead (as a plain upload) and
//                                  checks every caller keeps its promise (src-test/test_upload_ahead.py);
//                                  _core.run_network_on(net, device) puts a Network on it.
//   _core.host_register_device(id)  an OpenCL device that offers host_register (keeping a list) and
//                                  checks its callers (src-test/test_pinned_batches.py).
// The last four wrap a real device (ForwardingDevice) and override only what they count or check.
#include <pybind11/stl.h>

#include <cstdlib>
#include <map>
#include <mutex>
#ifdef __linux__
#include <sys/mman.h>  // mincore
#include <unistd.h>    // sysconf
#endif

#include "bindings.h"
#include "devices.h"
#include "fake_metal_api.h"
#include "gpu/gpu_backend.h"
#include "memory_pool.h"
#include "metal_device.h"
#include "metal_fast_paths.h"
#include "metal_plan.h"
#include "network.h"

using namespace dn;
using namespace dn_py;

namespace {

// A Device (kept alive by shared_ptr) with what the test reads back from it.
struct TestDevice {
    std::shared_ptr<Device> device;
    std::shared_ptr<std::vector<std::string>> log = std::make_shared<std::vector<std::string>>();
    std::shared_ptr<std::vector<std::string>> notes = std::make_shared<std::vector<std::string>>();
    std::shared_ptr<std::map<std::string, int>> calls = std::make_shared<std::map<std::string, int>>();
    std::shared_ptr<FakeMetalFaults> faults;  // the fake Metal device's
};

// ---- forwarding every call to a real device ----

// A Device that forwards every call to the device it wraps (a real one: pocl in the tests); the test
// devices below derive from it and override only what they check or count. Each forwarded call that
// read or wrote device memory (a fast path only when it ran) reports those buffers to touched(), a
// no-op here: how the upload_ahead checker sees every use, fast paths included.
class ForwardingDevice : public Device {
public:
    explicit ForwardingDevice(std::shared_ptr<Device> inner) : inner_(std::move(inner)) {}

    const DeviceInfo& info() const override { return inner_->info(); }
    std::vector<DType> storage_types() const override { return inner_->storage_types(); }

    DeviceMemory* alloc(size_t bytes) override { return inner_->alloc(bytes); }
    void free(DeviceMemory* m) override { inner_->free(m); }
    void upload(DeviceMemory* d, size_t o, const void* s, size_t b) override { inner_->upload(d, o, s, b); }
    void download(const DeviceMemory* s, size_t o, void* d, size_t b) override {
        inner_->download(s, o, d, b);
        touched({s});
    }
    void* host_alloc(size_t bytes) override { return inner_->host_alloc(bytes); }
    void host_free(void* p) override { inner_->host_free(p); }
    bool host_register(void* p, size_t b) override { return inner_->host_register(p, b); }
    void host_unregister(void* p) override { inner_->host_unregister(p); }
    bool can_upload_ahead() const override { return inner_->can_upload_ahead(); }
    void upload_ahead(DeviceMemory* d, size_t o, const void* s, size_t b) override { inner_->upload_ahead(d, o, s, b); }
    void copy(const DeviceMemory* s, size_t so, DeviceMemory* d, size_t dof, size_t b) override {
        inner_->copy(s, so, d, dof, b);
        touched({s, d});
    }
    bool copy_rows(const DeviceMemory* s, size_t so, size_t sp, DeviceMemory* d, size_t dof, size_t dp, size_t row_bytes,
                   size_t rows) override {
        return ran(inner_->copy_rows(s, so, sp, d, dof, dp, row_bytes, rows), {s, d});
    }
    void set_choice_agreement(std::function<void(float*, size_t)> sum) override {
        inner_->set_choice_agreement(std::move(sum));
    }
    bool zero(DeviceMemory* d, size_t bytes) override { return ran(inner_->zero(d, bytes), {d}); }
    std::shared_ptr<QueueMark> mark_queue() override { return inner_->mark_queue(); }
    void download_marked(const QueueMark* mark, const DeviceMemory* s, size_t o, void* d, size_t b) override {
        inner_->download_marked(mark, s, o, d, b);
        touched({s});
    }

    void launch(const char* name, LaunchDims dims, const std::vector<KernelArg>& args) override {
        inner_->launch(name, dims, args);
        std::vector<const DeviceMemory*> bufs;
        for (const KernelArg& a : args)
            if (a.buffer) bufs.push_back(a.buffer);
        touched(bufs);
    }
    uint32_t max_group_size(const char* name) override { return inner_->max_group_size(name); }
    void synchronize() override { inner_->synchronize(); }

    bool gemm(bool ta, bool tb, int M, int N, int K, float alpha, const DeviceMemory* A, size_t a_off, int lda,
              const DeviceMemory* B, size_t b_off, int ldb, float beta, DeviceMemory* C, size_t c_off, int ldc) override {
        return ran(inner_->gemm(ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta, C, c_off, ldc), {A, B, C});
    }
    bool gemm_half(DType dtype, DType c_dtype, bool ta, bool tb, int M, int N, int K, float alpha, const DeviceMemory* A,
                   size_t a_off, int lda, const DeviceMemory* B, size_t b_off, int ldb, float beta, DeviceMemory* C,
                   size_t c_off, int ldc) override {
        return ran(inner_->gemm_half(dtype, c_dtype, ta, tb, M, N, K, alpha, A, a_off, lda, B, b_off, ldb, beta, C,
                                     c_off, ldc),
                   {A, B, C});
    }
    bool conv2d(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* w, DeviceMemory* y) override {
        return ran(inner_->conv2d(p, x, w, y), {x, w, y});
    }
    bool conv2d_backward_data(const ConvParams& p, const DeviceMemory* dy, const DeviceMemory* w,
                              DeviceMemory* dx) override {
        return ran(inner_->conv2d_backward_data(p, dy, w, dx), {dy, w, dx});
    }
    bool conv2d_backward_weights(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* dy,
                                 DeviceMemory* dw) override {
        return ran(inner_->conv2d_backward_weights(p, x, dy, dw), {x, dy, dw});
    }
    bool pool(const PoolParams& p, const DeviceMemory* x, DeviceMemory* y) override {
        return ran(inner_->pool(p, x, y), {x, y});
    }
    bool pool_backward(const PoolParams& p, const DeviceMemory* x, const DeviceMemory* dy, DeviceMemory* dx) override {
        return ran(inner_->pool_backward(p, x, dy, dx), {x, dy, dx});
    }
    bool batchnorm_train(const NchwShape& s, float eps, DeviceMemory* y, DeviceMemory* mean, DeviceMemory* var,
                         DeviceMemory* x_norm, const DeviceMemory* scale, const DeviceMemory* bias) override {
        return ran(inner_->batchnorm_train(s, eps, y, mean, var, x_norm, scale, bias), {y, mean, var, x_norm, scale, bias});
    }
    bool batchnorm_backward(const NchwShape& s, float eps, DeviceMemory* dy, const DeviceMemory* x_norm,
                            const DeviceMemory* scale, const DeviceMemory* var, DeviceMemory* dscale,
                            DeviceMemory* dbias) override {
        return ran(inner_->batchnorm_backward(s, eps, dy, x_norm, scale, var, dscale, dbias),
                   {dy, x_norm, scale, var, dscale, dbias});
    }

    bool begin_capture() override { return inner_->begin_capture(); }
    std::unique_ptr<Recording> end_capture(std::string* why) override { return inner_->end_capture(why); }
    DeviceMemoryStats memory_stats() const override { return inner_->memory_stats(); }
    std::map<std::string, int> fast_path_failures() const override { return inner_->fast_path_failures(); }
    std::map<std::string, int> fast_path_declines() const override { return inner_->fast_path_declines(); }
    std::string judged_fast_paths() const override { return inner_->judged_fast_paths(); }

protected:
    // The buffers a forwarded call read or wrote, after it ran.
    virtual void touched(const std::vector<const DeviceMemory*>& buffers) { (void)buffers; }

    std::shared_ptr<Device> inner_;

private:
    bool ran(bool offered, std::initializer_list<const DeviceMemory*> buffers) {
        if (offered) touched(buffers);
        return offered;
    }
};

// ---- upload_ahead's promise, checked over a real device ----

// Offers Device::upload_ahead (as a plain upload) and checks, at each call, what the CUDA device relies
// on: no op since the previous upload used the destination, and it was not allocated since. Every op
// gets a sequence number; a broken promise is written to `notes`, each upload_ahead counted in `calls`.
// Recording stays off: a replayed recording's buffer uses would pass by touched().
class UploadAheadCheckingDevice final : public ForwardingDevice {
public:
    UploadAheadCheckingDevice(std::shared_ptr<Device> inner, TestDevice& t)
        : ForwardingDevice(std::move(inner)), notes_(t.notes), calls_(t.calls) {}

    DeviceMemory* alloc(size_t bytes) override {
        DeviceMemory* m = inner_->alloc(bytes);
        std::lock_guard<std::mutex> lock(mutex_);
        allocated_[m] = last_use_[m] = ++seq_;
        return m;
    }
    void free(DeviceMemory* m) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            allocated_.erase(m), last_use_.erase(m);
        }
        inner_->free(m);
    }
    void upload(DeviceMemory* d, size_t o, const void* s, size_t b) override {
        uploaded(d);
        inner_->upload(d, o, s, b);
    }
    bool can_upload_ahead() const override { return true; }
    void upload_ahead(DeviceMemory* d, size_t o, const void* s, size_t b) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++(*calls_)["upload_ahead"];
            if (last_use_[d] >= upload_point_)
                notes_->push_back("upload_ahead into a buffer used since the previous upload (op " +
                                  std::to_string(last_use_[d]) + ", upload at op " + std::to_string(upload_point_) + ")");
            if (allocated_[d] >= upload_point_) notes_->push_back("upload_ahead into a buffer allocated since the previous upload");
        }
        uploaded(d);
        inner_->upload(d, o, s, b);
    }
    bool begin_capture() override { return false; }

private:
    void touched(const std::vector<const DeviceMemory*>& buffers) override {
        std::lock_guard<std::mutex> lock(mutex_);
        ++seq_;
        for (const DeviceMemory* m : buffers) last_use_[m] = seq_;
    }
    void uploaded(const DeviceMemory* d) {
        std::lock_guard<std::mutex> lock(mutex_);
        upload_point_ = ++seq_;
        last_use_[d] = seq_;
    }

    std::shared_ptr<std::vector<std::string>> notes_;
    std::shared_ptr<std::map<std::string, int>> calls_;
    std::mutex mutex_;
    uint64_t seq_ = 0, upload_point_ = 0;
    std::map<const DeviceMemory*, uint64_t> allocated_, last_use_;
};

// ---- host_register's contract, checked over a real device ----

// Offers Device::host_register (page-locking nothing: it keeps a list) and checks its callers: each
// region registered once and unregistered while still mapped (Linux: mincore). Counts in `calls`:
// "host_register", "host_unregister", and "upload from registered memory" for each upload (ahead or
// not) whose source lies in a registered region; a broken promise goes to `notes`.
class HostRegisterCheckingDevice final : public ForwardingDevice {
public:
    HostRegisterCheckingDevice(std::shared_ptr<Device> inner, TestDevice& t)
        : ForwardingDevice(std::move(inner)), notes_(t.notes), calls_(t.calls) {}

    bool host_register(void* p, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        ++(*calls_)["host_register"];
        if (!regions_.emplace(reinterpret_cast<uintptr_t>(p), bytes).second) notes_->push_back("registered twice");
        return true;
    }
    void host_unregister(void* p) override {
        std::lock_guard<std::mutex> lock(mutex_);
        ++(*calls_)["host_unregister"];
        auto it = regions_.find(reinterpret_cast<uintptr_t>(p));
        if (it == regions_.end()) return;  // allowed: nothing happens
        if (!mapped(p, it->second)) notes_->push_back("unregistered after its memory was unmapped");
        regions_.erase(it);
    }
    void upload(DeviceMemory* d, size_t o, const void* s, size_t b) override {
        count_registered(s, b);
        inner_->upload(d, o, s, b);
    }
    void upload_ahead(DeviceMemory* d, size_t o, const void* s, size_t b) override {
        count_registered(s, b);
        inner_->upload_ahead(d, o, s, b);
    }

private:
    static bool mapped(void* p, size_t bytes) {
#ifdef __linux__
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        std::vector<unsigned char> pages((bytes + page - 1) / page + 1);
        return mincore(p, bytes, pages.data()) == 0;  // ENOMEM: part of the range is not mapped
#else
        (void)p, (void)bytes;
        return true;
#endif
    }
    void count_registered(const void* s, size_t bytes) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto at = reinterpret_cast<uintptr_t>(s);
        auto it = regions_.upper_bound(at);
        if (it != regions_.begin() && at + bytes <= std::prev(it)->first + std::prev(it)->second)
            ++(*calls_)["upload from registered memory"];
    }

    std::shared_ptr<std::vector<std::string>> notes_;
    std::shared_ptr<std::map<std::string, int>> calls_;
    std::mutex mutex_;
    std::map<uintptr_t, size_t> regions_;  // start -> bytes
};

// ---- kernel launches counted on a real device ----

// Device `inner` unchanged, each kernel launch counted in `calls` as "kernel <name>" (which kernels
// an op or a training step runs: the fused batchnorm + activation passes, src-test/test_batchnorm_activate.py).
// Data-parallel choice agreement (Device::set_choice_agreement): each set and clear counted, and each
// time it is set the sum is tried on a 1 from this rank, its result noted as "agreement sum <total>"
// (the rank count where every rank sets it in lockstep: src-test/test_distributed.py).
class KernelCountingDevice : public ForwardingDevice {
public:
    KernelCountingDevice(std::shared_ptr<Device> inner, std::shared_ptr<std::map<std::string, int>> calls)
        : ForwardingDevice(std::move(inner)), calls_(std::move(calls)) {}

    void launch(const char* name, LaunchDims dims, const std::vector<KernelArg>& args) override {
        count(std::string("kernel ") + name);
        ForwardingDevice::launch(name, dims, args);
    }
    void set_choice_agreement(std::function<void(float*, size_t)> sum) override {
        float one = 1.0f;
        if (sum) sum(&one, 1);
        count(sum ? "agreement set" : "agreement cleared");
        if (sum) count("agreement sum " + std::to_string((int)one));
        ForwardingDevice::set_choice_agreement(std::move(sum));
    }

protected:
    void count(const std::string& what) {
        std::lock_guard<std::mutex> lock(mutex_);
        ++(*calls_)[what];
    }

private:
    std::shared_ptr<std::map<std::string, int>> calls_;
    std::mutex mutex_;
};

// ---- host fast paths over a real device ----

// Kernel launches counted as above, and every vendor fast path (convolution, pooling, batchnorm)
// claimed, computed on the host with the CPU backend and counted by its name.
class HostFastPathDevice final : public KernelCountingDevice {
public:
    HostFastPathDevice(std::shared_ptr<Device> inner, std::shared_ptr<std::map<std::string, int>> calls)
        : KernelCountingDevice(std::move(inner), std::move(calls)), cpu_(make_cpu_backend()) {}

    // fp32 only, as a fast path without half support (src-lib/gpu/PRECISION.md): false for half data
    bool conv2d(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* w, DeviceMemory* y) override {
        if (p.dtype != DType::f32) return false;
        Tensor hx = down(x, p.x), hw = down(w, weights(p)), hy(shape(p.y));
        cpu_->conv2d(hx, hw, geom(p), hy);
        return up(hy, y), count("conv2d"), true;
    }
    bool conv2d_backward_data(const ConvParams& p, const DeviceMemory* dy, const DeviceMemory* w,
                              DeviceMemory* dx) override {
        Tensor hdy = down(dy, p.y), hw = down(w, weights(p)), hdx = down(dx, p.x);
        cpu_->conv2d_backward_data(hdy, hw, geom(p), hdx);
        return up(hdx, dx), count("conv2d_backward_data"), true;
    }
    bool conv2d_backward_weights(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* dy,
                                 DeviceMemory* dw) override {
        Tensor hx = down(x, p.x), hdy = down(dy, p.y), hdw = down(dw, weights(p));
        cpu_->conv2d_backward_weights(hx, hdy, geom(p), hdw);
        return up(hdw, dw), count("conv2d_backward_weights"), true;
    }
    bool pool(const PoolParams& p, const DeviceMemory* x, DeviceMemory* y) override {
        if (p.dtype != DType::f32) return false;
        Tensor hx = down(x, p.x), hy(shape(p.y));
        PoolGeom g{p.size, p.stride_y, p.stride_x, p.padding};
        if (p.max) cpu_->maxpool(hx, g, hy);
        else cpu_->avgpool_local(hx, g, hy);
        return up(hy, y), count(p.max ? "maxpool" : "avgpool"), true;
    }
    bool pool_backward(const PoolParams& p, const DeviceMemory* x, const DeviceMemory* dy, DeviceMemory* dx) override {
        Tensor hx = down(x, p.x), hdy = down(dy, p.y), hdx = down(dx, p.x);
        PoolGeom g{p.size, p.stride_y, p.stride_x, p.padding};
        if (p.max) cpu_->maxpool_backward(hx, hdy, g, hdx);
        else cpu_->avgpool_local_backward(hx, hdy, g, hdx);
        return up(hdx, dx), count(p.max ? "maxpool_backward" : "avgpool_backward"), true;
    }
    bool batchnorm_train(const NchwShape& s, float eps, DeviceMemory* y, DeviceMemory* mean, DeviceMemory* var,
                         DeviceMemory* x_norm, const DeviceMemory* scale, const DeviceMemory* bias) override {
        NchwShape ch{1, s.c, 1, 1};
        Tensor hy = down(y, s), hm(shape(ch)), hv(shape(ch)), hxn(shape(s)), hs = down(scale, ch), hb = down(bias, ch);
        cpu_->batchnorm_train(hy, hm, hv, hxn, hs, hb, eps);
        up(hy, y), up(hm, mean), up(hv, var), up(hxn, x_norm);
        return count("batchnorm_train"), true;
    }
    bool batchnorm_backward(const NchwShape& s, float eps, DeviceMemory* dy, const DeviceMemory* x_norm,
                            const DeviceMemory* scale, const DeviceMemory* var, DeviceMemory* dscale,
                            DeviceMemory* dbias) override {
        NchwShape ch{1, s.c, 1, 1};
        Tensor hdy = down(dy, s), hxn = down(x_norm, s), hs = down(scale, ch), hv = down(var, ch),
               hds = down(dscale, ch), hdb = down(dbias, ch);
        cpu_->batchnorm_backward(hdy, hxn, hs, hv, eps, hds, hdb);
        up(hdy, dy), up(hds, dscale), up(hdb, dbias);
        return count("batchnorm_backward"), true;
    }

private:
    static Shape shape(const NchwShape& s) { return Shape{s.n, s.c, s.h, s.w}; }
    static NchwShape weights(const ConvParams& p) { return NchwShape{p.y.c, p.x.c / p.groups, p.kh, p.kw}; }
    static ConvGeom geom(const ConvParams& p) {
        return ConvGeom{p.kh, p.kw, p.stride_y, p.stride_x, p.pad, p.dilation, p.groups};
    }
    Tensor down(const DeviceMemory* m, const NchwShape& s) {
        Tensor t(shape(s));
        inner_->download(m, 0, t.data(), t.size() * sizeof(float));
        return t;
    }
    void up(const Tensor& t, DeviceMemory* m) { inner_->upload(m, 0, t.data(), t.size() * sizeof(float)); }

    std::unique_ptr<Backend> cpu_;
};

MetalPipelineLimits limits_of(const py::tuple& t) {
    return MetalPipelineLimits{t[0].cast<uint32_t>(), t[1].cast<uint32_t>()};
}

// A TestDevice over a wrapper of the real device `id`: wrap(inner, t) makes the wrapper, which may keep
// t's shared records (calls, notes).
template <class Wrap>
std::unique_ptr<TestDevice> wrapping(const std::string& id, Wrap wrap) {
    auto t = std::make_unique<TestDevice>();
    auto be = make_backend(id);
    if (!be->device()) throw DarknetError(id + " is not a device");
    t->device = wrap(be->device(), *t);
    return t;
}

}  // namespace

void bind_test_devices(py::module_& m) {
    py::class_<Device, std::shared_ptr<Device>>(m, "Device", "A GPU device (opaque; tests pass it to Ops).")
        .def_property_readonly("name", [](const Device& d) { return d.info().name; }, "the device's own name")
        .def_property_readonly("judged_fast_paths", &Device::judged_fast_paths,
                               "DARKNET_PY_SELFTEST's value when the device was made ('' outside judging mode)");
    py::class_<TestDevice>(m, "TestDevice", "A test-only device and what it recorded.")
        .def_property_readonly("device", [](const TestDevice& t) { return t.device; })
        .def("log", [](const TestDevice& t) { return *t.log; }, "every call the fake Metal API got, one line each")
        .def("clear_log", [](TestDevice& t) { t.log->clear(); })
        .def("notes", [](const TestDevice& t) { return *t.notes; }, "the fallback lines the device printed")
        .def("calls", [](const TestDevice& t) { return *t.calls; }, "fast-path calls and kernel launches by name")
        .def("fail_next", [](TestDevice& t, const std::string& call, const std::string& how) {
            if (!t.faults) throw DarknetError("fail_next: not a fake Metal device");
            if (how == "raise") t.faults->raising.push_back(call);
            else if (how == "command_buffer") t.faults->failing_buffers.push_back(call);
            else if (how == "segment") t.faults->failing_segments.push_back(call);
            else throw DarknetError("fail_next: how is 'raise', 'command_buffer' or 'segment', not '" + how + "'");
        }, py::arg("call"), py::arg("how"),
           "The next MPS call `call` ('gemm' or a graph op name) of the fake Metal device fails as metal_objc.mm "
           "reports it: 'raise' (an Objective-C exception: the call fails at once) or 'command_buffer' (its "
           "command buffer fails on the GPU: the next wait fails) or 'segment' (an earlier segment MPSGraph "
           "committed fails: the next wait fails with it).")
        .def("mps_failures", [](TestDevice& t) { return t.device->fast_path_failures(); },
             "MPS calls that failed at run time, per path")
        .def("max_group_size", [](TestDevice& t, const std::string& k) { return t.device->max_group_size(k.c_str()); })
        .def("launch", [](TestDevice& t, const std::string& kernel, uint32_t groups, uint32_t group, int buffers,
                          int struct_bytes) {
            // `buffers` fresh buffers then a struct of `struct_bytes` zero bytes (< 0: none)
            std::vector<DeviceMemory*> mem;
            std::vector<KernelArg> args;
            for (int i = 0; i < buffers; ++i) mem.push_back(t.device->alloc(64)), args.push_back(KernelArg::buf(mem.back()));
            std::vector<char> bytes(struct_bytes > 0 ? struct_bytes : 0);
            if (struct_bytes >= 0) args.push_back(KernelArg{nullptr, bytes.data(), bytes.size()});
            try {
                t.device->launch(kernel.c_str(), LaunchDims{groups, group}, args);
            } catch (...) {
                for (auto* b : mem) t.device->free(b);
                throw;
            }
            for (auto* b : mem) t.device->free(b);
        }, "launches a kernel with fresh buffers (for the argument-binding tests)")
        .def("copy_bytes", [](TestDevice& t, const py::bytes& src, size_t src_offset, size_t dst_bytes,
                              size_t dst_offset, size_t n, const py::bytes& upload, size_t upload_offset) {
            // the device's copy(src + src_offset -> dst + dst_offset, n) and upload(dst + upload_offset,
            // `upload`) on fresh buffers: the destination's bytes after both
            Device& d = *t.device;
            std::string s = src, u = upload;
            DeviceMemory *a = d.alloc(s.size()), *b = d.alloc(dst_bytes);
            d.upload(a, 0, s.data(), s.size());
            d.copy(a, src_offset, b, dst_offset, n);
            d.upload(b, upload_offset, u.data(), u.size());
            std::string out(dst_bytes, '\0');
            d.download(b, 0, out.data(), dst_bytes);
            d.free(a), d.free(b);
            return py::bytes(out);
        }, py::arg("src"), py::arg("src_offset"), py::arg("dst_bytes"), py::arg("dst_offset"), py::arg("n"),
           py::arg("upload") = py::bytes(), py::arg("upload_offset") = 0)
        .def("gemm", [](TestDevice& t, bool ta, bool tb, int M, int N, int K, float alpha, const FloatArray& A,
                        size_t a_off, int lda, const FloatArray& B, size_t b_off, int ldb, float beta,
                        const FloatArray& C, size_t c_off, int ldc) {
            // the device's own GEMM on flat buffers with element offsets: (used, C)
            Device& d = *t.device;
            auto put = [&](const FloatArray& a) {
                DeviceMemory* m = d.alloc(a.size() * sizeof(float));
                d.upload(m, 0, a.data(), a.size() * sizeof(float));
                return m;
            };
            DeviceMemory *mA = put(A), *mB = put(B), *mC = put(C);
            bool used = d.gemm(ta, tb, M, N, K, alpha, mA, a_off, lda, mB, b_off, ldb, beta, mC, c_off, ldc);
            py::array_t<float> out(C.size());
            d.download(mC, 0, out.mutable_data(), C.size() * sizeof(float));
            d.free(mA), d.free(mB), d.free(mC);
            return py::make_tuple(used, out);
        });

    m.def("fake_metal_device", [](const std::string& compile_error, std::map<std::string, py::tuple> limits,
                                  bool busy, py::object mps_env) {
        FakeMetalOptions o;
        o.compile_error = compile_error;
        for (auto& [k, v] : limits) o.limits[k] = limits_of(v);
        o.busy = busy;
        auto t = std::make_unique<TestDevice>();
        t->faults = o.faults;
        std::string env = mps_env.is_none() ? "" : mps_env.cast<std::string>();
        t->device = make_metal_device(std::make_unique<FakeMetalApi>(o, t->log), "// msl",
                                      std::getenv("DARKNET_PY_SELFTEST"), mps_env.is_none() ? nullptr : env.c_str(),
                                      t->notes);
        return t;
    }, py::arg("compile_error") = "", py::arg("limits") = std::map<std::string, py::tuple>{},
       py::arg("busy") = false, py::arg("mps_env") = py::none(),
       "MetalDevice over FakeMetalApi. limits: kernel -> (maxTotalThreadsPerThreadgroup, threadExecutionWidth); "
       "mps_env: DARKNET_PY_MPS's value. The MPS paths are chosen as the real device's: DARKNET_PY_SELFTEST and "
       "the selftest results file of 'metal'.");

    using Inner = std::shared_ptr<Device>;
    m.def("host_fast_path_device", [](const std::string& id) {
        return wrapping(id, [](Inner d, TestDevice& t) { return std::make_shared<HostFastPathDevice>(d, t.calls); });
    }, "Device `id` with every vendor fast path claimed and computed on the host (CPU backend).");

    m.def("kernel_counting_device", [](const std::string& id) {
        return wrapping(id, [](Inner d, TestDevice& t) { return std::make_shared<KernelCountingDevice>(d, t.calls); });
    }, "Device `id` unchanged, each kernel launch counted in calls() as 'kernel <name>'.");
    m.def("upload_ahead_device", [](const std::string& id) {
        return wrapping(id, [](Inner d, TestDevice& t) { return std::make_shared<UploadAheadCheckingDevice>(d, t); });
    }, "Device `id` offering upload_ahead (a plain upload) and noting every broken promise of its callers.");
    m.def("host_register_device", [](const std::string& id) {
        return wrapping(id, [](Inner d, TestDevice& t) { return std::make_shared<HostRegisterCheckingDevice>(d, t); });
    }, "Device `id` offering host_register (keeping a list) and noting every broken promise of its callers.");
    m.def("run_network_on", [](Network& n, std::shared_ptr<Device> d) { n.set_backend(std::make_unique<GpuBackend>(d)); },
          "Moves a Network onto a test device (GpuBackend over it).");

    m.def("metal_mps_paths", [](py::object env, const std::string& gpu) {
        std::string e = env.is_none() ? "" : env.cast<std::string>();
        MpsPathChoice c =
            choose_mps_paths(std::getenv("DARKNET_PY_SELFTEST"), env.is_none() ? nullptr : e.c_str(), gpu);
        py::dict on;
        for (int i = 0; i < kMpsPathCount; ++i) on[mps_path_name((MpsPath)i)] = c.enabled[i];
        return py::make_tuple(on, c.note);
    }, py::arg("env"), py::arg("gpu") = "FakeMetal", "The Metal device's MPS path choice on GPU `gpu` with "
       "DARKNET_PY_MPS=env (None: unset), DARKNET_PY_SELFTEST and the selftest results file: ({name: on}, note).");

    // MemoryPool over malloc, refusing allocations beyond `capacity` bytes in all (as a full GPU would).
    struct HostMemoryPool {
        size_t capacity, allocated = 0;
        std::map<void*, size_t> sizes;
        MemoryPool pool;
        explicit HostMemoryPool(size_t cap)
            : capacity(cap),
              pool([this](size_t n) -> void* {
                       if (allocated + n > capacity) return nullptr;
                       void* p = std::malloc(n);
                       if (p) allocated += n, sizes[p] = n;
                       return p;
                   },
                   [this](void* p) {
                       allocated -= sizes[p];
                       sizes.erase(p);
                       std::free(p);
                   }) {}
    };
    py::class_<HostMemoryPool>(m, "HostMemoryPool", "The CUDA device's caching pool over host memory (tests).")
        .def(py::init<size_t>(), py::arg("capacity"))
        .def("take", [](HostMemoryPool& h, size_t n) { return (uintptr_t)h.pool.take(n); },
             "A block's address, 0 when out of memory.")
        .def("give", [](HostMemoryPool& h, uintptr_t p) { h.pool.give((void*)p); })
        .def("release", [](HostMemoryPool& h, uintptr_t p) { h.pool.release((void*)p); })
        .def("release_cached", [](HostMemoryPool& h) { h.pool.release_cached(); })
        .def_property_readonly("raw_allocated", [](const HostMemoryPool& h) { return h.allocated; })
        .def("stats", [](const HostMemoryPool& h) {
            const MemoryStats& s = h.pool.stats();
            py::dict d;
            d["in_use"] = s.in_use, d["reserved"] = s.reserved, d["peak_in_use"] = s.peak_in_use;
            d["peak_reserved"] = s.peak_reserved;
            return d;
        })
        .def_static("rounded", &MemoryPool::rounded);

    // The pure plans of metal_plan.h on shapes alone (no buffer: shapes past MPS's limits are checked
    // without allocating them): (ok, why).
    auto nchw = [](const std::vector<int>& s) {
        if (s.size() != 4) throw DarknetError("a shape is [n, c, h, w]");
        return NchwShape{s[0], s[1], s[2], s[3]};
    };
    m.def("metal_plan_conv", [nchw](const std::vector<int>& x, const std::vector<int>& y, int k, int stride, int pad,
                                    int dilation, int groups) {
        ConvParams p;
        p.x = nchw(x), p.y = nchw(y), p.kh = p.kw = k, p.stride_x = p.stride_y = stride, p.pad = pad;
        p.dilation = dilation, p.groups = groups;
        GraphConvPlan g;
        std::string why;
        bool ok = metal_plan::plan_conv(p, &g, &why);
        return py::make_tuple(ok, why);
    }, py::arg("x"), py::arg("y"), py::arg("k"), py::arg("stride") = 1, py::arg("pad") = 0, py::arg("dilation") = 1,
       py::arg("groups") = 1);
    m.def("metal_plan_pool", [nchw](const std::vector<int>& x, const std::vector<int>& y, int size, int stride,
                                    int padding) {
        PoolParams p;
        p.x = nchw(x), p.y = nchw(y), p.size = size, p.stride_x = p.stride_y = stride, p.padding = padding;
        GraphPoolPlan g;
        std::string why;
        bool ok = metal_plan::plan_pool(p, &g, &why);
        return py::make_tuple(ok, why);
    });
    m.def("metal_plan_norm", [nchw](const std::vector<int>& s) {
        GraphNormPlan g;
        std::string why;
        bool ok = metal_plan::plan_norm(nchw(s), 1e-5f, &g, &why);
        return py::make_tuple(ok, why);
    });
    m.def("metal_plan_gemm", [](int M, int N, int K, int lda, int ldb, int ldc) {
        // buffers as large as each matrix needs: only MPS's own limits can decline
        MpsGemmPlan g;
        std::string why;
        auto bytes = [](int rows, int ld) { return (size_t)rows * ld * sizeof(float); };
        bool ok = metal_plan::plan_gemm(false, false, M, N, K, 1.0f, nullptr, 0, lda, bytes(M, lda), nullptr, 0, ldb,
                                        bytes(K, ldb), 0.0f, nullptr, 0, ldc, bytes(M, ldc), &g, &why);
        return py::make_tuple(ok, why);
    });

    m.def("metal_group_limit", [](uint32_t max_threads, uint32_t width) {
        return metal_plan::group_limit(MetalPipelineLimits{max_threads, width});
    });
}
