#include "cudnn_api.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "dynamic_library.h"

namespace dn {

namespace {

#define DN_BIND(name) bind_symbol(lib, #name, &api->name)

CudnnApi* open_cudnn(std::string* why) {
    const char* off = std::getenv("DARKNET_PY_CUDNN");
    if (off && std::strcmp(off, "0") == 0) {
        *why = "cuDNN off (DARKNET_PY_CUDNN=0)";
        return nullptr;
    }
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("DARKNET_PY_CUDNN_LIBRARY")) candidates.push_back(env);
    candidates.push_back("libcudnn.so.9");
#ifdef DARKNET_PY_CUDA_LIB_DIR
    candidates.push_back(std::string(DARKNET_PY_CUDA_LIB_DIR) + "/libcudnn.so.9");
#endif
    std::string path, tried;
    void* lib = open_first_library(candidates, &path, &tried);
    if (!lib) {
        *why = "cuDNN not found (tried " + tried + "; pip install nvidia-cudnn-cu13 or set DARKNET_PY_CUDNN_LIBRARY)";
        return nullptr;
    }
    auto* api = new CudnnApi();  // process lifetime, as the library stays loaded
    api->path = path;
    bool ok = DN_BIND(cudnnGetVersion) && DN_BIND(cudnnGetErrorString) && DN_BIND(cudnnCreate) &&
              DN_BIND(cudnnDestroy) && DN_BIND(cudnnSetStream) && DN_BIND(cudnnCreateTensorDescriptor) &&
              DN_BIND(cudnnSetTensor4dDescriptor) && DN_BIND(cudnnDestroyTensorDescriptor) &&
              DN_BIND(cudnnCreateFilterDescriptor) && DN_BIND(cudnnSetFilter4dDescriptor) &&
              DN_BIND(cudnnDestroyFilterDescriptor) && DN_BIND(cudnnCreateConvolutionDescriptor) &&
              DN_BIND(cudnnSetConvolution2dDescriptor) && DN_BIND(cudnnSetConvolutionGroupCount) &&
              DN_BIND(cudnnSetConvolutionMathType) && DN_BIND(cudnnDestroyConvolutionDescriptor) &&
              DN_BIND(cudnnGetConvolutionForwardAlgorithm_v7) &&
              DN_BIND(cudnnGetConvolutionBackwardDataAlgorithm_v7) &&
              DN_BIND(cudnnGetConvolutionBackwardFilterAlgorithm_v7) &&
              DN_BIND(cudnnFindConvolutionForwardAlgorithm) && DN_BIND(cudnnFindConvolutionBackwardDataAlgorithm) &&
              DN_BIND(cudnnFindConvolutionBackwardFilterAlgorithm) && DN_BIND(cudnnConvolutionForward) &&
              DN_BIND(cudnnConvolutionBackwardData) && DN_BIND(cudnnConvolutionBackwardFilter);
    if (ok && api->cudnnGetVersion() / 10000 == 9) return api;  // the layout of these calls is cuDNN 9's
    *why = path + (ok ? " is not cuDNN 9 (version " + std::to_string(api->cudnnGetVersion()) + ")"
                      : " lacks a cuDNN entry point this build uses");
    delete api;
    return nullptr;
}

#undef DN_BIND

}  // namespace

std::string CudnnApi::version() const {
    size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch since cuDNN 9
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

const CudnnApi* cudnn_api(std::string* why) {
    static std::once_flag once;
    static CudnnApi* api = nullptr;
    static std::string reason;
    std::call_once(once, [] { api = open_cudnn(&reason); });
    if (!api && why) *why = reason;
    return api;
}

}  // namespace dn
