// Convolutions through cuDNN for CudaDevice: descriptors and the algorithm of each pass, made once
// per convolution shape and kept; the device owns the workspace and the stream. Forward overwrites
// y; the backward passes accumulate (+=) into dx and dw, as the Device contract asks (device.h),
// except the half weight gradient, which overwrites dw (a half scratch there).
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cudnn_api.h"
#include "gpu/device.h"

namespace dn {

enum class ConvPass { forward = 0, backward_data = 1, backward_weights = 2 };

class CudnnConvolutions {
public:
    // How an algorithm is chosen: by timing the algorithms per shape and pass (the default;
    // yolov4-tiny batch 64 on an H100: training 977 img/s, heuristics 839): cudnnFind's list, its
    // usable candidates timed again in CUDA graphs (retime()); or by cuDNN's heuristics
    // (DARKNET_PY_CUDNN=heuristic: no GPU work).
    enum class Choice { heuristic, measured };

    // Null with *why when cuDNN is missing or its handle cannot be made.
    static std::unique_ptr<CudnnConvolutions> open(cudaStream_t stream, bool tf32, std::string* why);
    ~CudnnConvolutions();

    // The workspace bytes the pass's algorithm needs, or -1 where cuDNN has none for it (or it is
    // not chosen yet and !may_choose). Chosen on the first call per shape and pass (a choice whose
    // workspace exceeds kMaxWorkspace is skipped); choosing may run work on the GPU
    // (Choice::measured), so never while recording. in_a and in_b are the pass's inputs (as for
    // run()), read by the timed choice; null: cudnnFind's own times decide.
    long long workspace_for(const ConvParams& p, ConvPass pass, bool may_choose, const void* in_a = nullptr,
                            const void* in_b = nullptr);
    // Runs a pass whose workspace_for() was asked before. Inputs: forward (x, w) -> y;
    // backward_data (dy, w) -> dx; backward_weights (x, dy) -> dw.
    void run(const ConvParams& p, ConvPass pass, const void* in_a, const void* in_b, void* out, void* workspace,
             size_t workspace_bytes);

    // While set (Device::set_choice_agreement), a timed choice is made alike on every rank: the ranks'
    // timings summed, the best total chosen. A choice made alone before is made again, agreed, the
    // first time its shape and pass run while set.
    void set_agreement(std::function<void(float*, size_t)> sum) { agree_ = std::move(sum); }

    static constexpr size_t kMaxWorkspace = size_t(512) << 20;

private:
    struct Shape;  // the descriptors and choices of one convolution shape
    CudnnConvolutions(const CudnnApi* api, CudnnApi::Handle handle, cudaStream_t stream, bool tf32, Choice choice);
    Shape& shape(const ConvParams& p);
    void enqueue(Shape& s, const ConvParams& p, ConvPass pass, int algo, int math, const void* in_a, const void* in_b,
                 void* out, void* workspace, size_t workspace_bytes);
    // cudnnFind's usable candidates timed again and perf sorted by those times; returns how many
    // (cudnn_convolutions.cpp)
    int retime(const ConvParams& p, ConvPass pass, const void* in_a, const void* in_b, CudnnApi::AlgoPerf* perf,
                int n, const std::function<bool(const CudnnApi::AlgoPerf&)>& usable);
    void check(int status, const char* what) const;
    void trace(const ConvParams& p, ConvPass pass, const CudnnApi::AlgoPerf* perf, int n, int pick, int retimed);

    const CudnnApi* api_;
    CudnnApi::Handle handle_;
    cudaStream_t stream_;
    bool tf32_;
    Choice choice_;
    std::map<std::array<int, 17>, std::unique_ptr<Shape>> shapes_;
    std::function<void(float*, size_t)> agree_;
    bool trace_ = false;  // DARKNET_PY_CUDNN_TRACE: print every choice (cudnn_convolutions.cpp)
};

}  // namespace dn
