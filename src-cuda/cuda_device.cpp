// CudaDevice: the thin Device of NVIDIA GPUs. One in-order stream per device for the work (plus
// one for upload_ahead's copies); kernels from the
// embedded fatbin, looked up by name; cuBLAS (opened at run time) for GEMM and cuDNN (likewise, when
// found) for convolutions; allocations from a caching pool (memory_pool.h); recording as CUDA
// graphs. Everything above it lives in GpuBackend.
#include "cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>

#include "cpu/thread_pool.h"
#include "cublas_api.h"
#include "cudnn_convolutions.h"
#include "errors.h"
#include "memory_pool.h"

namespace dn {
namespace {

void check(cudaError_t e, const std::string& what) {
    if (e != cudaSuccess) throw DarknetError("CUDA: " + what + " failed: " + cudaGetErrorString(e));
}

// An allocation *is* its device pointer, cast to and from the opaque type (as OpenCLDevice does).
DeviceMemory* to_memory(void* p) { return reinterpret_cast<DeviceMemory*>(p); }
char* to_ptr(const DeviceMemory* m) { return reinterpret_cast<char*>(const_cast<DeviceMemory*>(m)); }

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

DeviceInfo describe(int index, const cudaDeviceProp& p) {
    DeviceInfo info;
    info.id = "cuda:" + std::to_string(index);
    info.name = p.name;
    info.vendor = "NVIDIA";
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    info.driver = "CUDA driver " + version_string(driver) + ", runtime " + version_string(runtime);
    info.memory_bytes = p.totalGlobalMem;
    info.compute_units = p.multiProcessorCount;
    info.details = "compute capability " + std::to_string(p.major) + "." + std::to_string(p.minor);
    std::string why;
    const CublasApi* cublas = cublas_api(&why);
    info.details += cublas ? ", cuBLAS " + cublas->version() : ", " + why + " (the kernel text's GEMM runs instead)";
    const CudnnApi* cudnn = cudnn_api(&why);
    info.details += cudnn ? ", cuDNN " + cudnn->version() : ", cuDNN not used: " + why;
    return info;
}

// Page-locked host memory for the whole process (portable: pinned for every device, so an upload on
// any CudaDevice may DMA straight from it): host_alloc's blocks, and the caller's memory that
// host_register page-locked in place.
class PinnedHostBlocks {
public:
    static PinnedHostBlocks& instance() {
        static PinnedHostBlocks blocks;
        return blocks;
    }
    void* alloc(size_t bytes) {
        void* p = nullptr;
        if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
            cudaGetLastError();  // out of memory is not sticky; the caller uses pageable memory
            return nullptr;
        }
        add(p, bytes, false);
        return p;
    }
    bool register_memory(void* p, size_t bytes) {
        if (!p || !bytes || covers(p, 1)) return false;
        if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) != cudaSuccess) {
            cudaGetLastError();  // e.g. memory the driver cannot lock: the caller's uploads are staged
            return false;
        }
        add(p, bytes, true);
        return true;
    }
    // host_free's and host_unregister's: each undoes only its own kind of block.
    void release(void* p, bool registered) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
        if (it == blocks_.end() || it->second.registered != registered) return;
        blocks_.erase(it);
        if (registered)
            cudaHostUnregister(p);
        else
            cudaFreeHost(p);
    }
    // Whether [p, p + bytes) lies inside one block.
    bool covers(const void* p, size_t bytes) const {
        std::lock_guard<std::mutex> lock(mutex_);
        auto at = reinterpret_cast<uintptr_t>(p);
        auto it = blocks_.upper_bound(at);
        if (it == blocks_.begin()) return false;
        --it;
        return at + bytes <= it->first + it->second.bytes;
    }

private:
    struct Block {
        size_t bytes;
        bool registered;  // host_register's (cudaHostUnregister), not host_alloc's (cudaFreeHost)
    };
    void add(void* p, size_t bytes, bool registered) {
        std::lock_guard<std::mutex> lock(mutex_);
        blocks_[reinterpret_cast<uintptr_t>(p)] = Block{bytes, registered};
    }
    mutable std::mutex mutex_;
    std::map<uintptr_t, Block> blocks_;  // start -> block
};

// What a recording needs after the capture: the graph, and which buffers it reads or writes (a
// freed buffer invalidates it: its address may be handed to someone else).
struct CaptureState {
    std::unordered_set<const void*> buffers;
    bool valid = true;
};

class CudaDevice;

class CudaRecording final : public Recording {
public:
    CudaRecording(std::shared_ptr<CudaDevice> dev, cudaGraphExec_t exec, std::shared_ptr<CaptureState> state)
        : dev_(std::move(dev)), exec_(exec), state_(std::move(state)) {}
    ~CudaRecording() override;
    bool valid() const override;
    void replay() override;

private:
    std::shared_ptr<CudaDevice> dev_;  // kept alive: the graph runs on its stream
    cudaGraphExec_t exec_;
    std::shared_ptr<CaptureState> state_;
};

class CudaDevice final : public Device, public std::enable_shared_from_this<CudaDevice> {
public:
    explicit CudaDevice(int index) : index_(index), pool_(raw_alloc(index), raw_free(index)) {
        check(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
        cudaDeviceProp p{};
        check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
        info_ = describe(index, p);
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaStreamCreateWithFlags(&read_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaEventCreateWithFlags(&upload_point_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventCreateWithFlags(&ahead_done_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventCreateWithFlags(&direct_done_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaLibraryLoadData(&library_, cuda_kernels_fatbin(), nullptr, nullptr, 0, nullptr, nullptr, 0),
              "loading the kernels (built for other GPU architectures? rebuild with DARKNET_PY_CUDA_ARCHS)");
        open_cublas();
        std::string why;
        cudnn_ = CudnnConvolutions::open(stream_, tf32_requested(), &why);
    }

    ~CudaDevice() override {
        cudaSetDevice(index_);
        cudaStreamSynchronize(stream_);
        cudaStreamSynchronize(copy_stream_);
        if (cublas_) cublas_->cublasDestroy_v2(handle_);
        cudnn_.reset();
        if (workspace_) pool_.give(workspace_);
        if (conv_workspace_) pool_.give(conv_workspace_);
        for (int k = 0; k < 2; ++k) {
            if (pinned_[k]) cudaFreeHost(pinned_[k]);
            if (staged_[k]) cudaEventDestroy(staged_[k]);
        }
        pool_.release_cached();
        cudaLibraryUnload(library_);
        cudaEventDestroy(upload_point_);
        cudaEventDestroy(ahead_done_);
        cudaEventDestroy(direct_done_);
        cudaStreamDestroy(copy_stream_);
        cudaStreamDestroy(read_stream_);
        cudaStreamDestroy(stream_);
    }

    const DeviceInfo& info() const override { return info_; }

    DeviceMemory* alloc(size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        void* p = pool_.take(bytes);
        if (!p) {
            const DeviceMemoryStats s = memory_stats_locked();
            throw DarknetError("CUDA device " + info_.id + " is out of memory: " + std::to_string(bytes >> 20) +
                               " MiB requested, " + std::to_string(s.in_use >> 20) + " MiB in use (a smaller batch or "
                               "input size needs less)");
        }
        return to_memory(p);
    }

    void free(DeviceMemory* m) override {
        std::lock_guard<std::mutex> lock(mutex_);
        free_locked(m);
    }
    void free_locked(DeviceMemory* m) {
        invalidate_recordings(m);
        pool_.give(m);
    }
    void invalidate_recordings(const DeviceMemory* m) {
        for (auto it = captures_.begin(); it != captures_.end();) {
            auto s = it->lock();
            if (!s) {
                it = captures_.erase(it);
                continue;
            }
            if (s->buffers.count(m)) s->valid = false;
            ++it;
        }
    }

    void* host_alloc(size_t bytes) override { return PinnedHostBlocks::instance().alloc(bytes); }
    void host_free(void* p) override { PinnedHostBlocks::instance().release(p, false); }
    bool host_register(void* p, size_t bytes) override {
        check(cudaSetDevice(index_), "cudaSetDevice");
        return PinnedHostBlocks::instance().register_memory(p, bytes);
    }
    void host_unregister(void* p) override { PinnedHostBlocks::instance().release(p, true); }

    void upload(DeviceMemory* dst, size_t offset, const void* src, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (capturing_) return capture_fails("an upload from the host");
        mark_upload_point();
        copy_to_device(to_ptr(dst) + offset, src, bytes, stream_);
    }

    // On copy_stream_, so that it runs beside the kernels still queued on stream_: it waits only for
    // the work queued before the previous upload (upload_point_; the caller promises that nothing
    // queued since uses dst), and stream_ waits for it before its next work.
    // DARKNET_PY_UPLOAD_AHEAD=0 turns it off (every upload in order, as before).
    bool can_upload_ahead() const override {
        static const bool off = [] {
            const char* env = std::getenv("DARKNET_PY_UPLOAD_AHEAD");
            return env && std::strcmp(env, "0") == 0;
        }();
        return !off;
    }
    void upload_ahead(DeviceMemory* dst, size_t offset, const void* src, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (capturing_) return capture_fails("an upload from the host");
        check(cudaStreamWaitEvent(copy_stream_, upload_point_, 0), "upload");
        mark_upload_point();
        copy_to_device(to_ptr(dst) + offset, src, bytes, copy_stream_);
        check(cudaEventRecord(ahead_done_, copy_stream_), "upload");
        check(cudaStreamWaitEvent(stream_, ahead_done_, 0), "upload");
    }

    void download(const DeviceMemory* src, size_t offset, void* dst, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (capturing_) return capture_fails("a download to the host");
        check(cudaMemcpyAsync(dst, to_ptr(src) + offset, bytes, cudaMemcpyDeviceToHost, stream_), "download");
        check(cudaStreamSynchronize(stream_), "download");
        bytes_downloaded += bytes;
        ++blocking_downloads;
    }

    // A mark is an event on stream_; the marked download waits for it alone (outside the lock, so that
    // the loader's uploads go on meanwhile), then copies on read_stream_, which nothing else uses: the
    // kernels queued on stream_ since the mark run on while the bytes come down.
    struct Mark final : QueueMark {
        cudaEvent_t event = nullptr;
        ~Mark() override {
            if (event) cudaEventDestroy(event);
        }
    };
    std::shared_ptr<QueueMark> mark_queue() override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (capturing_) return nullptr;  // a recording has no point to wait for: download() then
        auto m = std::make_shared<Mark>();
        check(cudaEventCreateWithFlags(&m->event, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(m->event, stream_), "cudaEventRecord");
        return m;
    }
    void download_marked(const QueueMark* mark, const DeviceMemory* src, size_t offset, void* dst,
                         size_t bytes) override {
        auto* m = dynamic_cast<const Mark*>(mark);
        if (!m) return download(src, offset, dst, bytes);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (capturing_) return capture_fails("a download to the host");  // as download(): no host reads in a recording
        }
        check(cudaEventSynchronize(m->event), "download");  // the marked work only
        std::lock_guard<std::mutex> lock(mutex_);
        check(cudaMemcpyAsync(dst, to_ptr(src) + offset, bytes, cudaMemcpyDeviceToHost, read_stream_), "download");
        check(cudaStreamSynchronize(read_stream_), "download");
        bytes_downloaded += bytes;
    }

    void copy(const DeviceMemory* src, size_t src_offset, DeviceMemory* dst, size_t dst_offset,
              size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (bytes == 0 || failed_capture()) return;
        note_buffer(src);
        note_buffer(dst);
        check(cudaMemcpyAsync(to_ptr(dst) + dst_offset, to_ptr(src) + src_offset, bytes, cudaMemcpyDeviceToDevice,
                              stream_),
              "device copy");
    }

    void set_choice_agreement(std::function<void(float*, size_t)> sum) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (cudnn_) cudnn_->set_agreement(std::move(sum));
    }

    bool copy_rows(const DeviceMemory* src, size_t src_offset, size_t src_pitch, DeviceMemory* dst,
                   size_t dst_offset, size_t dst_pitch, size_t row_bytes, size_t rows) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (row_bytes == 0 || rows == 0 || failed_capture()) return true;
        note_buffer(src);
        note_buffer(dst);
        check(cudaMemcpy2DAsync(to_ptr(dst) + dst_offset, dst_pitch, to_ptr(src) + src_offset, src_pitch, row_bytes,
                                rows, cudaMemcpyDeviceToDevice, stream_),
              "device copy of rows");
        return true;
    }

    bool zero(DeviceMemory* dst, size_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (bytes == 0 || failed_capture()) return true;
        note_buffer(dst);
        check(cudaMemsetAsync(to_ptr(dst), 0, bytes, stream_), "zero");
        return true;
    }

    void launch(const char* name, LaunchDims dims, const std::vector<KernelArg>& args) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (dims.groups == 0 || failed_capture()) return;
        cudaKernel_t k = kernel(name);
        // cudaLaunchKernel takes a pointer to each argument's value: for a buffer, its device pointer.
        void* pointers[16];
        void* argv[16];
        if (args.size() > 16) throw DarknetError(std::string("kernel ") + name + ": more than 16 arguments");
        for (size_t i = 0; i < args.size(); ++i) {
            if (args[i].buffer) {
                note_buffer(args[i].buffer);
                pointers[i] = to_ptr(args[i].buffer);
                argv[i] = &pointers[i];
            } else {
                argv[i] = const_cast<void*>(args[i].bytes);
            }
        }
        check(cudaLaunchKernel((const void*)k, dim3(dims.groups), dim3(dims.group), argv, 0, stream_),
              std::string("launching ") + name);
    }

    uint32_t max_group_size(const char* name) override {
        std::lock_guard<std::mutex> lock(mutex_);
        cudaFuncAttributes a{};
        check(cudaFuncGetAttributes(&a, (const void*)kernel(name)), std::string("attributes of ") + name);
        return (uint32_t)a.maxThreadsPerBlock;
    }

    void synchronize() override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (capturing_) return capture_fails("a synchronization");
        check(cudaStreamSynchronize(stream_), "synchronize");
    }

    bool gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const DeviceMemory* A, size_t a_offset,
              int lda, const DeviceMemory* B, size_t b_offset, int ldb, float beta, DeviceMemory* C, size_t c_offset,
              int ldc) override {
        if (!cublas_) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        if (failed_capture()) return true;
        note_buffer(A);
        note_buffer(B);
        note_buffer(C);
        // cuBLAS is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T.
        const float* a = reinterpret_cast<const float*>(to_ptr(A)) + a_offset;
        const float* b = reinterpret_cast<const float*>(to_ptr(B)) + b_offset;
        float* c = reinterpret_cast<float*>(to_ptr(C)) + c_offset;
        int status = cublas_->cublasSgemm_v2(handle_, trans_b ? CublasApi::kOpT : CublasApi::kOpN,
                                             trans_a ? CublasApi::kOpT : CublasApi::kOpN, N, M, K, &alpha, b, ldb, a,
                                             lda, &beta, c, ldc);
        if (status != 0)
            throw DarknetError("cuBLAS sgemm (" + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                               ") failed with status " + std::to_string(status));
        return true;
    }

    bool gemm_half(DType dtype, DType c_dtype, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                   const DeviceMemory* A, size_t a_offset, int lda, const DeviceMemory* B, size_t b_offset, int ldb,
                   float beta, DeviceMemory* C, size_t c_offset, int ldc) override {
        if (!cublas_) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        if (failed_capture()) return true;
        note_buffer(A);
        note_buffer(B);
        note_buffer(C);
        // as gemm: column-major C^T = op(B)^T op(A)^T; 2-byte A and B, C in their type or fp32 (a
        // combination GemmEx lists for kCompute32F), fp32 accumulation and alpha, beta
        const int type = dtype == DType::bf16 ? CublasApi::kR16BF : CublasApi::kR16F;
        const bool c_f32 = c_dtype == DType::f32;
        int status = cublas_->cublasGemmEx(handle_, trans_b ? CublasApi::kOpT : CublasApi::kOpN,
                                           trans_a ? CublasApi::kOpT : CublasApi::kOpN, N, M, K, &alpha,
                                           to_ptr(B) + 2 * b_offset, type, ldb, to_ptr(A) + 2 * a_offset, type, lda,
                                           &beta, to_ptr(C) + (c_f32 ? 4 : 2) * c_offset,
                                           c_f32 ? CublasApi::kR32F : type, ldc, CublasApi::kCompute32F,
                                           CublasApi::kGemmDefault);
        if (status != 0)
            throw DarknetError(std::string("cuBLAS GemmEx in ") + dtype_name(dtype) + (c_f32 ? " into fp32" : "") +
                               " (" + std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                               ") failed with status " + std::to_string(status));
        return true;
    }

    // Half and TF32 activations NHWC: cuDNN's tensor-core convolutions read that as it is, and put
    // transposes around NCHW data (yolov4-tiny 416 batch 64, a bf16 training step on the H100: 4.9 of
    // 23.7 ms in nchwToNhwc / nhwcToNchw; training 2732 -> 3518 images/s, TF32 1993 -> 2379). fp16 since
    // its weight gradients go to cuDNN without the loss scale (GpuBackend::half_dw_scale). Plain fp32
    // stays NCHW (843 images/s in NHWC against 1387: no tensor cores, and slower NHWC kernels). One
    // image stays NCHW too: our im2col + cuBLAS path (conv2d below) beats cuDNN there.
    // src-lib/gpu/PRECISION.md, "Layout".
    Layout preferred_layout(DType t, int batch) const override {
        bool tensor_cores = t != DType::f32 || tf32_requested();
        return tensor_cores && batch > 1 && cudnn_ ? Layout::nhwc : Layout::nchw;
    }

    // cuDNN convolutions (the Device contract in device.h; false = GpuBackend's own kernels run).
    bool conv2d(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* w, DeviceMemory* y) override {
        // One NCHW image: im2col + cuBLAS is faster than cuDNN's algorithms on these small convolutions
        // (yolov4-tiny 416 batch 1, recorded: 0.71 ms against 1.10 ms heuristic, 1.36 ms timed, H100).
        // (In half too: im2col and cuBLAS's half GEMM.) NHWC has no im2col path of ours: cuDNN.
        if (p.x.n == 1 && !p.nhwc) return false;
        return convolve(p, ConvPass::forward, x, w, y);
    }
    bool conv2d_backward_data(const ConvParams& p, const DeviceMemory* dy, const DeviceMemory* w,
                              DeviceMemory* dx) override {
        return convolve(p, ConvPass::backward_data, dy, w, dx);
    }
    bool conv2d_backward_weights(const ConvParams& p, const DeviceMemory* x, const DeviceMemory* dy,
                                 DeviceMemory* dw) override {
        return convolve(p, ConvPass::backward_weights, x, dy, dw);
    }

    bool begin_capture() override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (capturing_) return false;
        // Relaxed: the pool may still call cudaMalloc from this thread while recording (not recorded).
        if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        capturing_ = true;
        capture_ = std::make_shared<CaptureState>();
        capture_failure_.clear();
        return true;
    }

    std::unique_ptr<Recording> end_capture(std::string* why) override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!capturing_) return nullptr;
        capturing_ = false;
        cudaGraph_t graph = nullptr;
        cudaError_t e = cudaStreamEndCapture(stream_, &graph);
        cudaGraphExec_t exec = nullptr;
        if (e == cudaSuccess && capture_failure_.empty()) e = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (e != cudaSuccess || !capture_failure_.empty()) {
            cudaGetLastError();  // clear the sticky-free error state of a failed capture
            if (exec) cudaGraphExecDestroy(exec);
            if (why) *why = capture_failure_.empty() ? std::string(cudaGetErrorString(e)) : capture_failure_;
            capture_.reset();
            return nullptr;
        }
        captures_.push_back(capture_);
        auto rec = std::make_unique<CudaRecording>(shared_from_this(), exec, capture_);
        capture_.reset();
        return rec;
    }

    DeviceMemoryStats memory_stats() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        return memory_stats_locked();
    }

    void replay(cudaGraphExec_t exec) {
        std::lock_guard<std::mutex> lock(mutex_);
        check(cudaGraphLaunch(exec, stream_), "replaying a recorded forward");
    }
    std::mutex& mutex() { return mutex_; }

private:
    static MemoryPool::RawAlloc raw_alloc(int index) {
        return [index](size_t bytes) -> void* {
            void* p = nullptr;
            cudaSetDevice(index);
            if (cudaMalloc(&p, bytes) != cudaSuccess) {
                cudaGetLastError();  // out of memory is not sticky; clear it so later calls succeed
                return nullptr;
            }
            return p;
        };
    }
    static MemoryPool::RawFree raw_free(int index) {
        return [index](void* p) {
            cudaSetDevice(index);
            cudaFree(p);
        };
    }

    // A batch (a 64-image 416x416 batch is 133 MB) goes up through two pinned buffers in turn: the
    // CPU threads copy chunk k+1 into one while the DMA engine sends chunk k from the other. Pageable
    // cudaMemcpy does the same staging with one thread and half the speed (7 GB/s measured on an H100
    // host). From host_alloc's or host_register's pinned memory it goes by DMA alone. Either way it
    // returns once the caller may reuse `src`: staged, after the last chunk is staged; pinned, after
    // the copy.
    static constexpr size_t kStagingBytes = size_t(8) << 20;
    void copy_to_device(char* dst, const void* src, size_t bytes, cudaStream_t stream) {
        if (PinnedHostBlocks::instance().covers(src, bytes)) {
            // Waits for the work queued before it, as the staging does once both buffers are in use, and
            // for the copy itself: an asynchronous copy from pinned memory reads `src` after returning.
            check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "upload");
            check(cudaEventRecord(direct_done_, stream), "upload");
            check(cudaEventSynchronize(direct_done_), "upload");
            ++pinned_uploads;
        } else if (bytes < kStagingBytes) {
            // From pageable memory this returns once `src` has been staged, so the caller may reuse it.
            check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "upload");
        } else {
            staged_upload(dst, static_cast<const char*>(src), bytes, stream);
        }
        bytes_uploaded += bytes;
    }
    void mark_upload_point() { check(cudaEventRecord(upload_point_, stream_), "upload"); }

    void staged_upload(char* dst, const char* src, size_t bytes, cudaStream_t stream) {
        for (int k = 0; k < 2 && !pinned_[k]; ++k) {
            check(cudaHostAlloc(&pinned_[k], kStagingBytes, cudaHostAllocDefault), "pinned staging buffer");
            check(cudaEventCreateWithFlags(&staged_[k], cudaEventDisableTiming), "staging event");
            check(cudaEventRecord(staged_[k], stream_), "staging event");
        }
        for (size_t done = 0, k = 0; done < bytes; done += kStagingBytes, k ^= 1) {
            size_t n = std::min(kStagingBytes, bytes - done);
            check(cudaEventSynchronize(staged_[k]), "upload");  // the DMA that last read buffer k is done
            char* pinned = static_cast<char*>(pinned_[k]);
            const char* from = src + done;
            ThreadPool::instance().parallel_for(n, [&](size_t a, size_t b) { std::memcpy(pinned + a, from + a, b - a); },
                                                size_t(1) << 20);
            check(cudaMemcpyAsync(dst + done, pinned, n, cudaMemcpyHostToDevice, stream), "upload");
            check(cudaEventRecord(staged_[k], stream), "upload");
        }
    }

    DeviceMemoryStats memory_stats_locked() const {
        const MemoryStats& s = pool_.stats();
        return DeviceMemoryStats{s.in_use, s.reserved, s.peak_in_use, s.peak_reserved};
    }

    static bool tf32_requested() {
        const char* tf32 = std::getenv("DARKNET_PY_TF32");
        return tf32 && *tf32 && std::strcmp(tf32, "0") != 0;
    }

    bool convolve(const ConvParams& p, ConvPass pass, const DeviceMemory* a, const DeviceMemory* b, DeviceMemory* out) {
        if (!cudnn_) return false;
        std::lock_guard<std::mutex> lock(mutex_);
        if (failed_capture()) return true;
        // Choosing an algorithm (timed ones run on the GPU) and growing the workspace happen outside
        // recordings; a shape's first forward always runs before it is recorded.
        long long need = cudnn_->workspace_for(p, pass, /*may_choose=*/!capturing_, to_ptr(a), to_ptr(b));
        if (need < 0) return false;
        if ((size_t)need > conv_workspace_bytes_) {
            if (capturing_) return false;
            if (conv_workspace_) {  // outgrown: back to the device, not kept reserved by the cache
                invalidate_recordings(conv_workspace_);
                pool_.release(conv_workspace_);
            }
            conv_workspace_ = to_memory(pool_.take((size_t)need));
            conv_workspace_bytes_ = conv_workspace_ ? (size_t)need : 0;
            if (!conv_workspace_) return false;  // out of memory for it: our kernels need less
        }
        note_buffer(a);
        note_buffer(b);
        note_buffer(out);
        if (conv_workspace_) note_buffer(conv_workspace_);
        cudnn_->run(p, pass, to_ptr(a), to_ptr(b), to_ptr(out), conv_workspace_ ? to_ptr(conv_workspace_) : nullptr,
                    conv_workspace_bytes_);
        return true;
    }

    void open_cublas() {
        std::string why;
        const CublasApi* api = cublas_api(&why);
        if (api && api->cublasCreate_v2(&handle_) == 0) {
            cublas_ = api;
            cublas_->cublasSetStream_v2(handle_, stream_);
            // Plain fp32 unless asked (DARKNET_PY_TF32=1): TF32 rounds the inputs to 10 mantissa bits.
            bool use_tf32 = tf32_requested();
            cublas_->cublasSetMathMode(handle_, use_tf32 ? CublasApi::kTf32Math : CublasApi::kDefaultMath);
            // An explicit workspace, so that cuBLAS allocates nothing while a graph is recorded.
            const size_t workspace_bytes = 32u << 20;
            workspace_ = pool_.take(workspace_bytes);
            if (workspace_) cublas_->cublasSetWorkspace_v2(handle_, workspace_, workspace_bytes);
            if (use_tf32) info_.details += " (TF32 on)";
        } else if (api) {
            info_.details += " (cublasCreate failed: the GEMM kernel of the kernel text runs instead)";
        }
    }

    cudaKernel_t kernel(const char* name) {
        auto it = kernels_.find(name);
        if (it != kernels_.end()) return it->second;
        cudaKernel_t k = nullptr;
        check(cudaLibraryGetKernel(&k, library_, name), std::string("finding kernel ") + name);
        return kernels_[name] = k;
    }

    // While recording: the work so far is being recorded, not run; a host transfer in the middle
    // cannot be recorded, so the whole recording is abandoned and the rest of the work skipped (the
    // caller runs it again normally).
    void capture_fails(const char* what) {
        if (capture_failure_.empty())
            capture_failure_ = std::string(what) + " in the middle (an op ran on the CPU)";
    }
    bool failed_capture() const { return capturing_ && !capture_failure_.empty(); }
    void note_buffer(const DeviceMemory* m) {
        if (capturing_) capture_->buffers.insert(m);
    }

public:
    cudaStream_t compute_stream() const { return stream_; }

private:
    int index_;
    DeviceInfo info_;
    mutable std::mutex mutex_;
    cudaStream_t stream_ = nullptr;
    cudaStream_t copy_stream_ = nullptr;  // upload_ahead's
    cudaEvent_t upload_point_ = nullptr;  // stream_'s work queued before the last upload
    cudaEvent_t ahead_done_ = nullptr;    // the last upload_ahead's copy
    cudaEvent_t direct_done_ = nullptr;   // the last upload straight from pinned memory
    cudaStream_t read_stream_ = nullptr;  // download_marked's
    cudaLibrary_t library_ = nullptr;
    std::map<std::string, cudaKernel_t, std::less<>> kernels_;  // transparent: no string per launch
    MemoryPool pool_;
    const CublasApi* cublas_ = nullptr;
    CublasApi::Handle handle_ = nullptr;
    void* workspace_ = nullptr;
    std::unique_ptr<CudnnConvolutions> cudnn_;  // null: cuDNN not found (or off)
    DeviceMemory* conv_workspace_ = nullptr;    // cuDNN's, grown outside recordings
    size_t conv_workspace_bytes_ = 0;
    void* pinned_[2] = {nullptr, nullptr};  // staged_upload's buffers, made on first use
    cudaEvent_t staged_[2] = {nullptr, nullptr};
    bool capturing_ = false;
    std::string capture_failure_;
    std::shared_ptr<CaptureState> capture_;
    std::vector<std::weak_ptr<CaptureState>> captures_;
};

CudaRecording::~CudaRecording() {
    std::lock_guard<std::mutex> lock(dev_->mutex());
    cudaGraphExecDestroy(exec_);
}

bool CudaRecording::valid() const {
    std::lock_guard<std::mutex> lock(dev_->mutex());
    return state_->valid;
}

void CudaRecording::replay() { dev_->replay(exec_); }

}  // namespace

// Why no CUDA device is listed, in words: the runtime calls a machine without any NVIDIA driver
// "CUDA driver version is insufficient for CUDA runtime version" (the driver it finds is version 0).
static std::string no_cuda_device_reason(cudaError_t e) {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaSuccess || e == cudaErrorNoDevice)
        return "no NVIDIA GPU found" + (driver ? " (NVIDIA driver for CUDA " + version_string(driver) + ")" : std::string());
    if (driver == 0)
        return "no NVIDIA driver: no NVIDIA GPU here, or its driver is not installed";
    if (e == cudaErrorInsufficientDriver)
        return "the NVIDIA driver (for CUDA " + version_string(driver) + ") is older than this build's CUDA runtime " +
               version_string(runtime) + ": update the driver";
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
}

std::vector<DeviceInfo> list_cuda_devices(std::string* why_none) {
    std::vector<DeviceInfo> out;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        cudaGetLastError();
        if (why_none) *why_none = no_cuda_device_reason(e);
        return out;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp p{};
        if (cudaGetDeviceProperties(&p, i) == cudaSuccess) out.push_back(describe(i, p));
    }
    return out;
}

void* cuda_compute_stream(const Device* d) {
    auto* cuda = dynamic_cast<const CudaDevice*>(d);
    return cuda ? (void*)cuda->compute_stream() : nullptr;
}

std::shared_ptr<Device> open_cuda_device(int index) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || index < 0 || index >= count) {
        cudaGetLastError();
        throw DarknetError("device 'cuda:" + std::to_string(index) + "' does not exist (" + std::to_string(count) +
                           " CUDA devices found; darknet_py info lists them)");
    }
    return std::make_shared<CudaDevice>(index);
}

}  // namespace dn
