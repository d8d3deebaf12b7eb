// The Device interface (after tinygrad's runtimes): what one GPU API must offer so that
// GpuBackend (gpu_backend.h) can run every op of the contract on it. A device allocates, copies,
// compiles the embedded kernel text (kernels/) once, and launches kernels by name. Everything
// else (which kernel, grid and group sizes, temporaries, fallback) lives in GpuBackend, once.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../tensor.h"  // DType

namespace dn {

// One allocation on a device. Opaque to everything but the device that made it.
struct DeviceMemory;

// A kernel argument: a buffer or a small plain struct passed by value (kernels/args.h).
struct KernelArg {
    DeviceMemory* buffer = nullptr;  // a buffer argument when set
    const void* bytes = nullptr;     // otherwise a struct argument of `size` bytes
    size_t size = 0;

    static KernelArg buf(DeviceMemory* m) { return KernelArg{m, nullptr, 0}; }
    template <class T>
    static KernelArg value(const T& v) { return KernelArg{nullptr, &v, sizeof(T)}; }
};

// A launch: `groups` threadgroups of `group` threads along x (1-D is what every kernel uses;
// the kernel maps its thread id to elements itself).
struct LaunchDims {
    uint32_t groups = 1;
    uint32_t group = 64;
};

// The vendor fast paths' view of a tensor: NCHW, whole buffer from offset 0, in the storage type of
// the params that carry it (ConvParams / PoolParams::dtype; fp32 elsewhere).
struct NchwShape {
    int n = 0, c = 0, h = 0, w = 0;
    size_t size() const { return (size_t)n * c * h * w; }
};

// A convolution as the fast paths get it: Darknet's geometry (backend.h ConvGeom: symmetric `pad`,
// output = (in + 2*pad - dilation*(kh-1) - 1) / stride + 1), weights [y.c, x.c/groups, kh, kw].
struct ConvParams {
    NchwShape x, y;
    int kh = 1, kw = 1, stride_y = 1, stride_x = 1, pad = 0, dilation = 1, groups = 1;
    DType dtype = DType::f32;  // of x, w and y (a path that lacks it returns false)
    // x, y (and dx, dy) channels last (tensor.h Layout), w then [out][kh][kw][in] and so a weight
    // gradient the pass writes (a path without NHWC returns false)
    bool nhwc = false;
    // The factor on a half weight gradient's fp32 sums before its half store (1 / fp16's loss scale)
    float dw_alpha = 1.0f;
};

// A local pooling as the fast paths get it: Darknet's geometry (backend.h PoolGeom): the window of
// size x size starts at -padding/2, output = (in + padding - size) / stride + 1; cells outside x are
// skipped (max over the cells inside; the average divides by their count).
struct PoolParams {
    NchwShape x, y;
    int size = 2, stride_y = 2, stride_x = 2, padding = 0;
    bool max = true;  // false: average
    DType dtype = DType::f32;  // of x and y (a path that lacks it returns false)
};

// What `darknet_py info` prints per device.
struct DeviceInfo {
    std::string id;        // "opencl:0", "cuda:1", "metal"
    std::string name;      // the device's own name
    std::string vendor;
    std::string driver;
    uint64_t memory_bytes = 0;
    int compute_units = 0;
    bool is_gpu = true;    // false for CPU runtimes and simulators (never chosen by device="auto")
    std::string details;   // anything else worth printing (CUDA: compute capability, cuBLAS version)
};

// Device memory figures (bytes) of a device that pools its allocations; zeros where it does not.
struct DeviceMemoryStats {
    uint64_t in_use = 0, reserved = 0, peak_in_use = 0, peak_reserved = 0;
};

// Work recorded once and replayed (a CUDA graph): the same kernels on the same buffers, whose
// contents may change between replays. It becomes invalid when a buffer it uses is freed.
class Recording {
public:
    virtual ~Recording() = default;
    virtual bool valid() const = 0;
    virtual void replay() = 0;
};

// A point in a device's queue (Device::mark_queue): the work queued before it. Opaque.
class QueueMark {
public:
    virtual ~QueueMark() = default;
};

class Device {
public:
    virtual ~Device() = default;
    virtual const DeviceInfo& info() const = 0;
    // The storage types this device's tensors may have (src-lib/gpu/PRECISION.md). Every device
    // compiles storage_kernels.h for all three; a device lists fewer where a type cannot run there.
    virtual std::vector<DType> storage_types() const { return {DType::f32, DType::f16, DType::bf16}; }
    // The layout the device's fast paths want for a pass of `batch` images in storage type t (tensor.h
    // Layout; Backend::preferred_layout): NCHW unless a device says otherwise.
    virtual Layout preferred_layout(DType t, int batch) const {
        (void)t, (void)batch;
        return Layout::nchw;
    }

    // ---- memory ----
    virtual DeviceMemory* alloc(size_t bytes) = 0;  // throws DarknetError when out of memory
    virtual void free(DeviceMemory* m) = 0;
    // Host <-> device copies; offsets and sizes in bytes. download waits for queued work.
    virtual void upload(DeviceMemory* dst, size_t offset, const void* src, size_t bytes) = 0;
    virtual void download(const DeviceMemory* src, size_t offset, void* dst, size_t bytes) = 0;
    // Optional: an upload that may run while queued work still runs (CUDA: a second stream), for the
    // next training batch. It waits only for the work queued before the previous upload of either
    // kind; the caller promises that no work queued since then uses dst's bytes (and that dst was
    // not allocated since: the pool may hand out memory that queued work still reads). Work queued
    // after it sees the data. Where not offered (can_upload_ahead false) it is a plain upload.
    virtual bool can_upload_ahead() const { return false; }
    virtual void upload_ahead(DeviceMemory* dst, size_t offset, const void* src, size_t bytes) {
        upload(dst, offset, src, bytes);
    }
    // Optional: `bytes` of page-locked host memory (CUDA: cudaHostAlloc) that uploads read by DMA alone,
    // where pageable memory is first copied into pinned staging buffers by the CPU (a 64-image 416x416
    // batch: 133 MB of memcpy a step, on every core). Null where not offered: the caller uses plain
    // memory. Uploads keep their contract either way (they return once the source may be reused), so
    // host_free may follow any upload at once.
    virtual void* host_alloc(size_t bytes) {
        (void)bytes;
        return nullptr;
    }
    virtual void host_free(void* p) { (void)p; }
    // Optional: page-locks `bytes` of the caller's memory at p (CUDA: cudaHostRegister), so that uploads
    // from it go by DMA alone, as from host_alloc's: the loader's batch buffers in shared memory, which
    // its worker processes fill, go up without the training process copying them into staging. False
    // where not offered or refused (the memory stays as it was). host_unregister(p) must come before
    // the memory is unmapped.
    virtual bool host_register(void* p, size_t bytes) {
        (void)p, (void)bytes;
        return false;
    }
    virtual void host_unregister(void* p) { (void)p; }
    virtual void copy(const DeviceMemory* src, size_t src_offset, DeviceMemory* dst, size_t dst_offset,
                      size_t bytes) = 0;
    // Optional: `rows` rows of `row_bytes` each, from src (rows src_pitch bytes apart) to dst (dst_pitch
    // apart), by the device's copy engine (CUDA: cudaMemcpy2DAsync): a route's channel slices, which the
    // copy_channels kernel moved at well under the memory's bandwidth (three integer divisions an element).
    // Returns false where not offered: the caller launches its kernel.
    virtual bool copy_rows(const DeviceMemory* src, size_t src_offset, size_t src_pitch, DeviceMemory* dst,
                           size_t dst_offset, size_t dst_pitch, size_t row_bytes, size_t rows) {
        (void)src, (void)src_offset, (void)src_pitch, (void)dst, (void)dst_offset, (void)dst_pitch;
        (void)row_bytes, (void)rows;
        return false;
    }
    // Data-parallel training: where the device chooses something by timing it (CUDA: cuDNN's algorithm
    // of each convolution shape and pass), every rank makes the same choice while `sum` is set: each
    // rank's timings are summed over the ranks (every rank calls sum in the same order, in place) and
    // the best total wins. A data-parallel step goes at its slowest rank's pace; ranks that time and
    // choose alone pick differently (yolov4-tiny bf16 on 4 H100s: 29.9 to 31.8 ms a step alone).
    // Null: each device chooses by itself.
    virtual void set_choice_agreement(std::function<void(float*, size_t)> sum) { (void)sum; }
    // Optional: bytes set to 0 by the device's own fill (CUDA: cudaMemsetAsync, which writes at close to
    // the memory's bandwidth; a kernel storing 2-byte halves one per thread reached about a third of it
    // zeroing the training deltas). Returns false where not offered: the caller launches its fill kernel.
    virtual bool zero(DeviceMemory* dst, size_t bytes) {
        (void)dst;
        (void)bytes;
        return false;
    }

    // Optional: reading results later without waiting for work queued since (a training step reads
    // its loss statistics after the next step is queued). mark_queue() marks the work queued so far;
    // download_marked() then copies bytes that work wrote, waiting only for it (CUDA: an event and a
    // stream of its own), not for the work queued after the mark. The caller promises that no work
    // queued after the mark writes those bytes and that the buffer lives until the copy returns.
    // Where not offered, mark_queue() returns null and download_marked() is download(): correct,
    // but it waits for everything queued.
    virtual std::shared_ptr<QueueMark> mark_queue() { return nullptr; }
    virtual void download_marked(const QueueMark* mark, const DeviceMemory* src, size_t offset, void* dst,
                                 size_t bytes) {
        (void)mark;
        download(src, offset, dst, bytes);
    }

    // ---- kernels ----
    // Runs kernel `name` of the embedded kernel text (compiled when the device was opened).
    virtual void launch(const char* name, LaunchDims dims, const std::vector<KernelArg>& args) = 0;
    // Largest group size the device allows for this kernel (GpuBackend clamps to it).
    virtual uint32_t max_group_size(const char* name) = 0;
    // Waits until every queued command has finished.
    virtual void synchronize() = 0;

    // ---- optional vendor fast paths; false = not offered here, GpuBackend runs its own kernels ----
    // Row-major C[M,N] = alpha * op(A) * op(B) + beta * C; each matrix starts at an element offset.
    virtual bool gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const DeviceMemory* A,
                      size_t a_offset, int lda, const DeviceMemory* B, size_t b_offset, int ldb, float beta,
                      DeviceMemory* C, size_t c_offset, int ldc) {
        return false;
    }
    // The same on fp16 / bf16 A and B (dtype) with fp32 accumulation and fp32 alpha, beta (cuBLAS
    // GemmEx); C in dtype too, or in fp32 (c_dtype: half training's fp32 weight gradient and columns).
    virtual bool gemm_half(DType dtype, DType c_dtype, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                           const DeviceMemory* A, size_t a_offset, int lda, const DeviceMemory* B, size_t b_offset,
                           int ldb, float beta, DeviceMemory* C, size_t c_offset, int ldc) {
        return false;
    }
    // Convolution, pooling and training batchnorm (cuDNN, MPS). Each has the meaning of the Backend
    // op of the same name (backend.h), backward passes ACCUMULATING (+=) into their gradients;
    // GpuBackend calls them before its own kernels, which run when they return false. In half
    // (p.dtype fp16 / bf16) every tensor argument is in p.dtype, and conv2d_backward_weights
    // OVERWRITES dw (a half scratch: GpuBackend adds it into the fp32 gradient, which accumulating
    // in half would round at every step).
    virtual bool conv2d(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* w, DeviceMemory* y) {
        return false;
    }
    virtual bool conv2d_backward_data(const ConvParams& p, const DeviceMemory* dy, const DeviceMemory* w,
                                      DeviceMemory* dx) {
        return false;
    }
    virtual bool conv2d_backward_weights(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* dy,
                                         DeviceMemory* dw) {
        return false;
    }
    virtual bool pool(const PoolParams& p, const DeviceMemory* x, DeviceMemory* y) { return false; }
    virtual bool pool_backward(const PoolParams& p, const DeviceMemory* x, const DeviceMemory* dy, DeviceMemory* dx) {
        return false;
    }
    // Batch statistics over N, H, W per channel (var unbiased), x_norm, y = x_norm * scale + bias in place.
    virtual bool batchnorm_train(const NchwShape& s, float eps, DeviceMemory* y, DeviceMemory* mean, DeviceMemory* var,
                                 DeviceMemory* x_norm, const DeviceMemory* scale, const DeviceMemory* bias) {
        return false;
    }
    virtual bool batchnorm_backward(const NchwShape& s, float eps, DeviceMemory* dy, const DeviceMemory* x_norm,
                                    const DeviceMemory* scale, const DeviceMemory* var, DeviceMemory* dscale,
                                    DeviceMemory* dbias) {
        return false;
    }

    // ---- optional: recording (CUDA graphs); false / null = not offered ----
    // Between begin_capture and end_capture, work is recorded instead of run. end_capture returns
    // null (with *why) when the recording failed, e.g. an op needed the host in the middle (a CPU
    // fallback): then nothing of that work ran, and the caller runs it again normally.
    virtual bool begin_capture() { return false; }
    virtual std::unique_ptr<Recording> end_capture(std::string* why) { return nullptr; }

    virtual DeviceMemoryStats memory_stats() const { return {}; }

    // Vendor fast paths that failed at run time and were switched off, with how many failures, by
    // path name ({"mps_conv2d": 1}); GpuBackend counts them among its fallbacks.
    virtual std::map<std::string, int> fast_path_failures() const { return {}; }
    // Calls a vendor fast path declined (a case it cannot take: our kernels ran it), by path name
    // ({"mps_conv2d": 3}); GpuBackend counts them among its fallbacks as "<path> declined".
    virtual std::map<std::string, int> fast_path_declines() const { return {}; }
    // The vendor fast paths this device was made to judge (DARKNET_PY_SELFTEST's value when it was
    // made: "1" or a list of names), empty when it was made outside judging mode. The selftest
    // refuses to judge a device object whose value differs from what it judges.
    virtual std::string judged_fast_paths() const { return {}; }

    // Host <-> device traffic since the device was opened (tests assert it per iteration).
    std::atomic<uint64_t> bytes_uploaded{0}, bytes_downloaded{0};
    // download() calls: each waited for all the work queued before it (download_marked waits for its
    // mark only). Tests count them where a loop must not wait for the device (a queued training step).
    std::atomic<uint64_t> blocking_downloads{0};
    // Uploads that went by DMA straight from host_alloc's or host_register's memory, not through staging.
    std::atomic<uint64_t> pinned_uploads{0};
};

}  // namespace dn
