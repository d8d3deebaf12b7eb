#include "nccl_collective.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_device.h"
#include "distributed/tcp_ring.h"  // CollectiveError
#include "nccl_api.h"

namespace dn {

namespace {

const NcclApi& api_or_throw() {
    std::string why;
    const NcclApi* api = nccl_api(&why);
    if (!api) throw DarknetError(why);
    return *api;
}

class NcclCollective final : public Collective {
public:
    NcclCollective(int rank, int size, const std::string& unique_id, int index, double timeout_s)
        : api_(api_or_throw()), rank_(rank), size_(size), index_(index), timeout_s_(timeout_s) {
        if ((int)unique_id.size() != NcclApi::kUniqueIdBytes)
            throw DarknetError("NCCL: the unique id has " + std::to_string(unique_id.size()) + " bytes, not " +
                               std::to_string(NcclApi::kUniqueIdBytes));
        NcclApi::UniqueId id;
        std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
        cuda(cudaSetDevice(index), "cudaSetDevice");
        cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
        cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
        nccl(api_.ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    }
    ~NcclCollective() override {
        if (comm_) (aborted_ ? api_.ncclCommAbort : api_.ncclCommDestroy)(comm_);
        if (stream_) cudaStreamDestroy(stream_);
        if (ready_) cudaEventDestroy(ready_);
        if (done_) cudaEventDestroy(done_);
        if (staging_) cudaFree(staging_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    const char* name() const override { return "nccl"; }
    bool reduces_on_own_thread() const override { return false; }  // NCCL queues; no thread needed

    void all_reduce_sum(const std::vector<Tensor>& tensors) override {
        if (tensors.empty()) return;
        if (tensors[0].on_host()) return Collective::all_reduce_sum(tensors);
        cudaStream_t compute = (cudaStream_t)cuda_compute_stream(tensors[0].device());
        if (!compute) throw DarknetError("NCCL reduces CUDA tensors only (train on cuda:N)");
        compute_ = compute;
        cuda(cudaEventRecord(ready_, compute), "cudaEventRecord");  // the gradients' kernels so far
        cuda(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
        nccl(api_.ncclGroupStart(), "ncclGroupStart");
        for (const Tensor& t : tensors) {
            void* p = (void*)t.memory();  // a CUDA DeviceMemory is the device address (cuda_device.cpp)
            nccl(api_.ncclAllReduce(p, p, t.size(), NcclApi::kFloat32, NcclApi::kSum, comm_, stream_),
                 "ncclAllReduce");
        }
        nccl(api_.ncclGroupEnd(), "ncclGroupEnd");
        pending_ = true;
    }

    void wait() override {
        if (!pending_) return;
        pending_ = false;
        // The update's kernels (on the compute stream) wait for the reductions on the device.
        cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
        cuda(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent");
    }

    void all_reduce_sum(float* data, size_t n) override {
        if (n == 0) return;
        cuda(cudaSetDevice(index_), "cudaSetDevice");
        if (n > staging_count_) {  // kept: cudaMalloc may synchronize the device, so not per call
            if (staging_) cudaFree(staging_);
            staging_ = nullptr;
            cuda(cudaMalloc(&staging_, n * sizeof(float)), "cudaMalloc");
            staging_count_ = n;
        }
        float* d = staging_;
        cuda(cudaMemcpyAsync(d, data, n * sizeof(float), cudaMemcpyHostToDevice, stream_), "cudaMemcpy");
        nccl(api_.ncclAllReduce(d, d, n, NcclApi::kFloat32, NcclApi::kSum, comm_, stream_), "ncclAllReduce");
        cuda(cudaMemcpyAsync(data, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "cudaMemcpy");
        cuda(cudaEventRecord(done_, stream_), "cudaEventRecord");
        wait_on_host(done_);
    }

private:
    // The watchdog: polls the event and NCCL's asynchronous error; a peer that died or hangs
    // aborts the communicator (NCCL would otherwise wait forever) and throws.
    void wait_on_host(cudaEvent_t e) {
        auto start = std::chrono::steady_clock::now();
        for (;;) {
            cudaError_t q = cudaEventQuery(e);
            if (q == cudaSuccess) return;
            if (q != cudaErrorNotReady) cuda(q, "cudaEventQuery");
            int async = 0;
            api_.ncclCommGetAsyncError(comm_, &async);
            if (async != NcclApi::kSuccess && async != NcclApi::kInProgress) {
                abort_comm();
                throw CollectiveError("rank " + std::to_string(rank_) + ": NCCL failed (" +
                                      api_.ncclGetErrorString(async) + "): another rank died or lost its link");
            }
            double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            if (waited > timeout_s_) {
                abort_comm();
                throw CollectiveError("rank " + std::to_string(rank_) + ": NCCL all-reduce did not complete in " +
                                      std::to_string((int)timeout_s_) + " s: another rank died or hangs");
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
    void abort_comm() {
        if (comm_ && !aborted_) api_.ncclCommAbort(comm_);
        aborted_ = true;
        comm_ = nullptr;
    }
    void cuda(cudaError_t e, const char* what) {
        if (e != cudaSuccess)
            throw CollectiveError("rank " + std::to_string(rank_) + ": " + what + ": " + cudaGetErrorString(e));
    }
    void nccl(int r, const char* what) {
        if (r != NcclApi::kSuccess && r != NcclApi::kInProgress)
            throw CollectiveError("rank " + std::to_string(rank_) + ": " + what + ": " + api_.ncclGetErrorString(r));
    }
    const NcclApi& api_;
    int rank_, size_, index_;
    double timeout_s_;
    NcclApi::Comm comm_ = nullptr;
    bool aborted_ = false, pending_ = false;
    cudaStream_t stream_ = nullptr, compute_ = nullptr;
    cudaEvent_t ready_ = nullptr, done_ = nullptr;
    float* staging_ = nullptr;  // the host all-reduce's device copy
    size_t staging_count_ = 0;
};

}  // namespace

bool nccl_available(std::string* why, std::string* version) {
    const NcclApi* api = nccl_api(why);
    if (api) *version = api->version() + " (" + api->path + ")";
    return api != nullptr;
}

std::string nccl_unique_id() {
    const NcclApi& api = api_or_throw();
    NcclApi::UniqueId id;
    int r = api.ncclGetUniqueId(&id);
    if (r != NcclApi::kSuccess) throw DarknetError(std::string("ncclGetUniqueId: ") + api.ncclGetErrorString(r));
    return std::string(id.internal, sizeof id.internal);
}

std::shared_ptr<Collective> make_nccl_collective(int rank, int size, const std::string& unique_id,
                                                 const std::string& device, double timeout_s) {
    if (device.rfind("cuda:", 0) != 0)
        throw DarknetError("NCCL trains on CUDA devices (cuda:N), not '" + device + "'");
    int index = std::stoi(device.substr(5));
    return std::make_shared<NcclCollective>(rank, size, unique_id, index, timeout_s);
}

}  // namespace dn
