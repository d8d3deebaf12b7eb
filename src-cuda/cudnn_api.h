// cuDNN, opened at run time (dlopen) like cuBLAS (cublas_api.h): never required, never linked, so the
// module builds with nvcc and cudart alone and loads where cuDNN is missing (GpuBackend's own
// convolution kernels run instead). The entry points used, declared by hand from cuDNN 9's
// cudnn_graph.h and cudnn_cnn.h (the "legacy" convolution API, still shipped in cuDNN 9).
#pragma once
#include <cstddef>
#include <string>

#include <cuda_runtime.h>

namespace dn {

struct CudnnApi {
    using Handle = struct cudnnContext*;
    using TensorDesc = struct cudnnTensorStruct*;
    using FilterDesc = struct cudnnFilterStruct*;
    using ConvDesc = struct cudnnConvolutionStruct*;
    enum : int { kNchw = 0, kNhwc = 1, kCrossCorrelation = 1 };  // formats, mode
    enum : int { kFloat = 0, kHalf = 2, kBfloat16 = 9 };  // cudnnDataType_t
    // cudnnMathType_t: FMA = plain fp32, no TF32; tensor op = tensor cores (half data, fp32 accumulation)
    enum : int { kDefaultMath = 0, kTensorOpMath = 1, kFmaMath = 3 };
    // cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the three structs share this layout.
    struct AlgoPerf {
        int algo;
        int status;
        float time;
        size_t memory;
        int determinism;
        int math_type;
        int reserved[3];
    };

    size_t (*cudnnGetVersion)() = nullptr;
    const char* (*cudnnGetErrorString)(int) = nullptr;
    int (*cudnnCreate)(Handle*) = nullptr;
    int (*cudnnDestroy)(Handle) = nullptr;
    int (*cudnnSetStream)(Handle, cudaStream_t) = nullptr;
    int (*cudnnCreateTensorDescriptor)(TensorDesc*) = nullptr;
    int (*cudnnSetTensor4dDescriptor)(TensorDesc, int format, int type, int n, int c, int h, int w) = nullptr;
    int (*cudnnDestroyTensorDescriptor)(TensorDesc) = nullptr;
    int (*cudnnCreateFilterDescriptor)(FilterDesc*) = nullptr;
    int (*cudnnSetFilter4dDescriptor)(FilterDesc, int type, int format, int k, int c, int h, int w) = nullptr;
    int (*cudnnDestroyFilterDescriptor)(FilterDesc) = nullptr;
    int (*cudnnCreateConvolutionDescriptor)(ConvDesc*) = nullptr;
    int (*cudnnSetConvolution2dDescriptor)(ConvDesc, int pad_h, int pad_w, int u, int v, int dilation_h,
                                           int dilation_w, int mode, int compute_type) = nullptr;
    int (*cudnnSetConvolutionGroupCount)(ConvDesc, int) = nullptr;
    int (*cudnnSetConvolutionMathType)(ConvDesc, int) = nullptr;
    int (*cudnnDestroyConvolutionDescriptor)(ConvDesc) = nullptr;
    // Heuristic choice (no work on the GPU) and measured choice (runs every algorithm).
    int (*cudnnGetConvolutionForwardAlgorithm_v7)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, int*,
                                                  AlgoPerf*) = nullptr;
    int (*cudnnGetConvolutionBackwardDataAlgorithm_v7)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int,
                                                       int*, AlgoPerf*) = nullptr;
    int (*cudnnGetConvolutionBackwardFilterAlgorithm_v7)(Handle, TensorDesc, TensorDesc, ConvDesc, FilterDesc, int,
                                                         int*, AlgoPerf*) = nullptr;
    int (*cudnnFindConvolutionForwardAlgorithm)(Handle, TensorDesc, FilterDesc, ConvDesc, TensorDesc, int, int*,
                                                AlgoPerf*) = nullptr;
    int (*cudnnFindConvolutionBackwardDataAlgorithm)(Handle, FilterDesc, TensorDesc, ConvDesc, TensorDesc, int, int*,
                                                     AlgoPerf*) = nullptr;
    int (*cudnnFindConvolutionBackwardFilterAlgorithm)(Handle, TensorDesc, TensorDesc, ConvDesc, FilterDesc, int,
                                                       int*, AlgoPerf*) = nullptr;
    int (*cudnnConvolutionForward)(Handle, const void* alpha, TensorDesc, const void* x, FilterDesc, const void* w,
                                   ConvDesc, int algo, void* workspace, size_t workspace_bytes, const void* beta,
                                   TensorDesc, void* y) = nullptr;
    int (*cudnnConvolutionBackwardData)(Handle, const void* alpha, FilterDesc, const void* w, TensorDesc,
                                        const void* dy, ConvDesc, int algo, void* workspace, size_t workspace_bytes,
                                        const void* beta, TensorDesc, void* dx) = nullptr;
    int (*cudnnConvolutionBackwardFilter)(Handle, const void* alpha, TensorDesc, const void* x, TensorDesc,
                                          const void* dy, ConvDesc, int algo, void* workspace, size_t workspace_bytes,
                                          const void* beta, FilterDesc, void* dw) = nullptr;
    std::string path;             // the library that was opened
    std::string version() const;  // "9.19.0"
};

// The process-wide cuDNN, or null with *why set. DARKNET_PY_CUDNN=0 turns it off (=heuristic: see
// cudnn_convolutions.h); otherwise it looks at
// DARKNET_PY_CUDNN_LIBRARY (set by darknet_py for pip's nvidia-cudnn-cu13), the loader's search path,
// then the toolkit it was built with.
const CudnnApi* cudnn_api(std::string* why);

}  // namespace dn
