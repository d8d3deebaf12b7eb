#include "cudnn_convolutions.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "errors.h"

namespace dn {

struct CudnnConvolutions::Shape {
    const CudnnApi* api;
    CudnnApi::TensorDesc x = nullptr, y = nullptr;
    CudnnApi::FilterDesc w = nullptr;
    CudnnApi::ConvDesc conv = nullptr;
    // Per pass: the algorithm and its workspace; algo -1 = not chosen yet, -2 = none usable.
    int algo[3] = {-1, -1, -1};
    bool half = false;  // fp16 / bf16 data
    size_t workspace[3] = {0, 0, 0};
    // Half data: the math type each pass's algorithm was found with. cuDNN tries an algorithm that
    // has no tensor-op variant with default math and reports it so; run under the descriptor's
    // tensor-op math it fails with CUDNN_STATUS_BAD_PARAM (seen on the H100: fp16 backward filter,
    // whenever the timed choice picked such an algorithm), so each pass runs with its own.
    int math[3] = {0, 0, 0};
    bool agreed[3] = {false, false, false};  // chosen with the other ranks (set_agreement)

    explicit Shape(const CudnnApi* a) : api(a) {}
    ~Shape() {
        if (x) api->cudnnDestroyTensorDescriptor(x);
        if (y) api->cudnnDestroyTensorDescriptor(y);
        if (w) api->cudnnDestroyFilterDescriptor(w);
        if (conv) api->cudnnDestroyConvolutionDescriptor(conv);
    }
};

std::unique_ptr<CudnnConvolutions> CudnnConvolutions::open(cudaStream_t stream, bool tf32, std::string* why) {
    const CudnnApi* api = cudnn_api(why);
    if (!api) return nullptr;
    CudnnApi::Handle handle = nullptr;
    int status = api->cudnnCreate(&handle);
    if (status != 0) {
        *why = std::string("cudnnCreate failed: ") + api->cudnnGetErrorString(status);
        return nullptr;
    }
    api->cudnnSetStream(handle, stream);
    const char* mode = std::getenv("DARKNET_PY_CUDNN");
    Choice choice = mode && std::strcmp(mode, "heuristic") == 0 ? Choice::heuristic : Choice::measured;
    auto opened = std::unique_ptr<CudnnConvolutions>(new CudnnConvolutions(api, handle, stream, tf32, choice));
    const char* trace = std::getenv("DARKNET_PY_CUDNN_TRACE");
    opened->trace_ = trace && *trace && std::strcmp(trace, "0") != 0;
    return opened;
}

CudnnConvolutions::CudnnConvolutions(const CudnnApi* api, CudnnApi::Handle handle, cudaStream_t stream, bool tf32,
                                     Choice choice)
    : api_(api), handle_(handle), stream_(stream), tf32_(tf32), choice_(choice) {}

CudnnConvolutions::~CudnnConvolutions() {
    shapes_.clear();
    api_->cudnnDestroy(handle_);
}

void CudnnConvolutions::check(int status, const char* what) const {
    if (status != 0) throw DarknetError(std::string("cuDNN: ") + what + " failed: " + api_->cudnnGetErrorString(status));
}

CudnnConvolutions::Shape& CudnnConvolutions::shape(const ConvParams& p) {
    std::array<int, 17> key{p.x.n, p.x.c, p.x.h, p.x.w, p.y.n, p.y.c, p.y.h, p.y.w, p.kh, p.kw,
                            p.stride_y, p.stride_x, p.pad, p.dilation, p.groups, (int)p.dtype, p.nhwc ? 1 : 0};
    auto it = shapes_.find(key);
    if (it != shapes_.end()) return *it->second;
    auto s = std::make_unique<Shape>(api_);
    const CudnnApi& a = *api_;
    check(a.cudnnCreateTensorDescriptor(&s->x), "a tensor descriptor");
    check(a.cudnnCreateTensorDescriptor(&s->y), "a tensor descriptor");
    check(a.cudnnCreateFilterDescriptor(&s->w), "a filter descriptor");
    check(a.cudnnCreateConvolutionDescriptor(&s->conv), "a convolution descriptor");
    // Half data (fp16 / bf16) with fp32 compute: cuDNN's "pseudo half" configurations.
    const int data = p.dtype == DType::f16 ? CudnnApi::kHalf : p.dtype == DType::bf16 ? CudnnApi::kBfloat16 : CudnnApi::kFloat;
    // NHWC tensors (tensor.h Layout) with KRSC filters: what the tensor-core kernels read without the
    // transposes cuDNN puts around them for NCHW half data
    const int format = p.nhwc ? CudnnApi::kNhwc : CudnnApi::kNchw;
    check(a.cudnnSetTensor4dDescriptor(s->x, format, data, p.x.n, p.x.c, p.x.h, p.x.w), "x");
    check(a.cudnnSetTensor4dDescriptor(s->y, format, data, p.y.n, p.y.c, p.y.h, p.y.w), "y");
    check(a.cudnnSetFilter4dDescriptor(s->w, data, format, p.y.c, p.x.c / p.groups, p.kh, p.kw), "weights");
    // Darknet pads symmetrically; its output size formula is cuDNN's.
    check(a.cudnnSetConvolution2dDescriptor(s->conv, p.pad, p.pad, p.stride_y, p.stride_x, p.dilation, p.dilation,
                                            CudnnApi::kCrossCorrelation, CudnnApi::kFloat),
          "the convolution");
    check(a.cudnnSetConvolutionGroupCount(s->conv, p.groups), "the group count");
    // FMA math: plain fp32 (as cuBLAS's default math); TF32 tensor cores only when asked; half data
    // always on tensor cores.
    s->half = p.dtype != DType::f32;
    int math = s->half ? CudnnApi::kTensorOpMath : tf32_ ? CudnnApi::kDefaultMath : CudnnApi::kFmaMath;
    check(a.cudnnSetConvolutionMathType(s->conv, math), "math type");
    return *(shapes_[key] = std::move(s));
}

long long CudnnConvolutions::workspace_for(const ConvParams& p, ConvPass pass, bool may_choose, const void* in_a,
                                           const void* in_b) {
    Shape& s = shape(p);
    const int k = (int)pass;
    const bool agree = agree_ && choice_ == Choice::measured;
    if (s.algo[k] == -1 || (agree && !s.agreed[k] && may_choose)) {
        if (!may_choose) return -1;
        const CudnnApi& a = *api_;
        // tensor-op math lets the search try both kinds (run() may have left another pass's)
        if (s.half) check(a.cudnnSetConvolutionMathType(s.conv, CudnnApi::kTensorOpMath), "math type");
        constexpr int kMax = 16;
        CudnnApi::AlgoPerf perf[kMax];
        int n = 0;
        bool measured = choice_ == Choice::measured;
        int status;
        if (pass == ConvPass::forward)
            status = (measured ? a.cudnnFindConvolutionForwardAlgorithm : a.cudnnGetConvolutionForwardAlgorithm_v7)(
                handle_, s.x, s.w, s.conv, s.y, kMax, &n, perf);
        else if (pass == ConvPass::backward_data)
            status = (measured ? a.cudnnFindConvolutionBackwardDataAlgorithm
                               : a.cudnnGetConvolutionBackwardDataAlgorithm_v7)(handle_, s.w, s.y, s.conv, s.x, kMax,
                                                                                &n, perf);
        else
            status = (measured ? a.cudnnFindConvolutionBackwardFilterAlgorithm
                               : a.cudnnGetConvolutionBackwardFilterAlgorithm_v7)(handle_, s.x, s.y, s.conv, s.w,
                                                                                  kMax, &n, perf);
        s.algo[k] = -2;  // none usable: GpuBackend's kernels (cuDNN refuses e.g. some dilated shapes)
        if (status != 0) n = 0;
        // Usable: works within the workspace limit; plain fp32 asked for: an algorithm reporting
        // tensor-op math (TF32) is skipped unless TF32 is on.
        auto usable = [&](const CudnnApi::AlgoPerf& q) {
            if (q.status != 0 || q.memory > kMaxWorkspace) return false;
            return tf32_ || s.half || q.math_type == CudnnApi::kFmaMath || q.math_type == CudnnApi::kDefaultMath;
        };
        const int retimed = n > 0 && measured ? retime(p, pass, in_a, in_b, perf, n, usable) : 0;
        constexpr int kMaths = 4, kSlots = 16 * kMaths;  // an (algorithm, math type) pair's slot
        auto slot = [](const CudnnApi::AlgoPerf& q) { return q.algo * kMaths + q.math_type; };
        int agreed = -1;
        if (agree) {
            // Every rank's time of each (algorithm, math type), summed; one unusable anywhere counts
            // as unusable (its sum stays >= kNever). The least sum wins on every rank alike.
            constexpr float kNever = 1e30f;
            std::vector<float> total(kSlots, kNever);
            for (int i = 0; i < n; ++i) {
                int at = slot(perf[i]);
                if (usable(perf[i]) && at >= 0 && at < kSlots) total[at] = std::min(total[at], perf[i].time);
            }
            agree_(total.data(), total.size());
            for (int at = 0; at < kSlots; ++at)
                if (total[at] < kNever && (agreed < 0 || total[at] < total[agreed])) agreed = at;
            s.agreed[k] = true;
        }
        // perf is best first: alone, the first usable; agreed, the first of the agreed slot (none if no
        // slot was usable on every rank)
        int pick = -1;
        for (int i = 0; i < n && pick < 0; ++i)
            if (usable(perf[i]) && (!agree || slot(perf[i]) == agreed)) pick = i;
        if (pick >= 0) {
            s.algo[k] = perf[pick].algo;
            s.workspace[k] = perf[pick].memory;
            s.math[k] = perf[pick].math_type;
        }
        if (trace_) trace(p, pass, perf, n, pick, retimed);
    }
    return s.algo[k] < 0 ? -1 : (long long)s.workspace[k];
}

// DARKNET_PY_CUDNN_TRACE=1: each choice on stderr, with every algorithm cuDNN offered (best first; the
// first `retimed` timed in a graph, the rest with cudnnFind's times).
void CudnnConvolutions::trace(const ConvParams& p, ConvPass pass, const CudnnApi::AlgoPerf* perf, int n, int pick,
                              int retimed) {
    static const char* passes[] = {"forward", "backward_data", "backward_weights"};
    std::fprintf(stderr, "cuDNN %s %s %s x %dx%dx%dx%d -> y %dx%dx%dx%d, %dx%d/%d g%d:", passes[(int)pass],
                 dtype_name(p.dtype), p.nhwc ? "nhwc" : "nchw", p.x.n, p.x.c, p.x.h, p.x.w, p.y.n, p.y.c, p.y.h, p.y.w,
                 p.kh, p.kw, p.stride_x, p.groups);
    for (int i = 0; i < n; ++i)
        std::fprintf(stderr, " %salgo %d math %d %.4f ms%s %zu B status %d%s", i ? "| " : "", perf[i].algo,
                     perf[i].math_type, perf[i].time, i < retimed ? " (graph)" : "", perf[i].memory, perf[i].status,
                     i == pick ? " (chosen)" : "");
    std::fprintf(stderr, "\n");
}

void CudnnConvolutions::run(const ConvParams& p, ConvPass pass, const void* in_a, const void* in_b, void* out,
                            void* workspace, size_t workspace_bytes) {
    Shape& s = shape(p);
    const int k = (int)pass;
    enqueue(s, p, pass, s.algo[k], s.math[k], in_a, in_b, out, workspace, workspace_bytes);
}

void CudnnConvolutions::enqueue(Shape& s, const ConvParams& p, ConvPass pass, int algo, int math, const void* in_a,
                                const void* in_b, void* out, void* workspace, size_t workspace_bytes) {
    const float one = 1.0f, zero = 0.0f;
    const CudnnApi& a = *api_;
    if (s.half) check(a.cudnnSetConvolutionMathType(s.conv, math), "math type");
    if (pass == ConvPass::forward)
        check(a.cudnnConvolutionForward(handle_, &one, s.x, in_a, s.w, in_b, s.conv, algo, workspace,
                                        workspace_bytes, &zero, s.y, out),
              "convolution forward");
    else if (pass == ConvPass::backward_data)
        check(a.cudnnConvolutionBackwardData(handle_, &one, s.w, in_b, s.y, in_a, s.conv, algo, workspace,
                                             workspace_bytes, &one, s.x, out),
              "convolution backward (data)");
    else  // in half dw is overwritten: GpuBackend adds the half result into the fp32 gradient (device.h)
        check(a.cudnnConvolutionBackwardFilter(handle_, s.half ? &p.dw_alpha : &one, s.x, in_a, s.y, in_b, s.conv, algo,
                                               workspace, workspace_bytes, s.half ? &zero : &one, s.w, out),
              "convolution backward (weights)");
}

namespace {

// cudaMalloc'd scratch, freed on every way out of retime()
struct Scratch {
    void* p = nullptr;
    explicit Scratch(size_t bytes) {
        if (bytes && cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();
            p = nullptr;
        }
    }
    ~Scratch() {
        if (p) cudaFree(p);
    }
};

}  // namespace

// cudnnFind times each algorithm once, from the host, around one launch: for the short convolutions of
// small batches (tens of microseconds on an H200) that time is mostly launch overhead and varies
// more between processes than the algorithms differ (yolov3-tiny's forward in parts of 16 read 7500
// to 16200 images/s across processes by the algorithms it picked). So each usable candidate is timed
// again as the forward runs it: kRepeats launches recorded in one CUDA graph, replayed kRounds times,
// the fastest replay counted. Inputs are the pass's own; the output and workspace are scratch, so
// the accumulated gradients stay untouched. Anything failing leaves cudnnFind's times. Returns how many
// were timed again: perf's first entries after the sort.
int CudnnConvolutions::retime(const ConvParams& p, ConvPass pass, const void* in_a, const void* in_b,
                               CudnnApi::AlgoPerf* perf, int n,
                               const std::function<bool(const CudnnApi::AlgoPerf&)>& usable) {
    if (!in_a || !in_b) return 0;
    constexpr int kRepeats = 8, kRounds = 3, kMaxCandidates = 6;
    Shape& s = shape(p);
    const size_t elt = p.dtype == DType::f32 ? 4 : 2;
    size_t out_elems = pass == ConvPass::forward         ? (size_t)p.y.n * p.y.c * p.y.h * p.y.w
                       : pass == ConvPass::backward_data ? (size_t)p.x.n * p.x.c * p.x.h * p.x.w
                                                         : (size_t)p.y.c * (p.x.c / p.groups) * p.kh * p.kw;
    size_t most = 0;
    int candidates = 0;
    for (int i = 0; i < n && candidates < kMaxCandidates; ++i)
        if (usable(perf[i])) most = std::max(most, perf[i].memory), ++candidates;
    if (candidates < 2) return 0;  // nothing to choose between
    Scratch out(out_elems * elt), workspace(most);
    if (!out.p || (most && !workspace.p)) return 0;
    cudaEvent_t start = nullptr, stop = nullptr;
    if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
        if (start) cudaEventDestroy(start);
        cudaGetLastError();
        return 0;
    }
    std::vector<float> times(n, -1.0f);
    bool failed = false;
    for (int i = 0, tried = 0; i < n && tried < kMaxCandidates && !failed; ++i) {
        if (!usable(perf[i])) continue;
        ++tried;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        try {
            // once outside the graph: cuDNN's first launch of a kernel may load it
            enqueue(s, p, pass, perf[i].algo, perf[i].math_type, in_a, in_b, out.p, workspace.p, most);
            if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) throw 0;
            try {
                for (int r = 0; r < kRepeats; ++r)
                    enqueue(s, p, pass, perf[i].algo, perf[i].math_type, in_a, in_b, out.p, workspace.p, most);
            } catch (...) {
                cudaStreamEndCapture(stream_, &graph);
                throw;
            }
            if (cudaStreamEndCapture(stream_, &graph) != cudaSuccess || !graph) throw 0;
            if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) throw 0;
            float best = 1e30f;
            for (int round = 0; round <= kRounds; ++round) {  // round 0 warms up
                float ms = 0;
                if (cudaEventRecord(start, stream_) != cudaSuccess || cudaGraphLaunch(exec, stream_) != cudaSuccess ||
                    cudaEventRecord(stop, stream_) != cudaSuccess || cudaEventSynchronize(stop) != cudaSuccess ||
                    cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
                    throw 0;
                if (round > 0) best = std::min(best, ms / kRepeats);
            }
            times[i] = best;
        } catch (...) {
            failed = true;
        }
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGetLastError();  // a failed capture leaves its error behind
    if (failed) return 0;
    // the retimed candidates first, fastest first; the rest (unusable or past kMaxCandidates) after
    for (int i = 0; i < n; ++i)
        if (times[i] >= 0) perf[i].time = times[i];
    std::stable_sort(perf, perf + n, [&](const CudnnApi::AlgoPerf& l, const CudnnApi::AlgoPerf& r) {
        bool lt = usable(l) && l.time >= 0, rt = usable(r) && r.time >= 0;
        return lt != rt ? lt : lt && l.time < r.time;
    });
    return (int)std::count_if(times.begin(), times.end(), [](float t) { return t >= 0; });
}

}  // namespace dn
