#include "cublas_api.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "dynamic_library.h"

namespace dn {

namespace {

CublasApi* open_cublas(std::string* why) {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("DARKNET_PY_CUBLAS_LIBRARY")) candidates.push_back(env);
    candidates.push_back("libcublas.so.13");
    candidates.push_back("libcublas.so");
#ifdef DARKNET_PY_CUDA_LIB_DIR
    candidates.push_back(std::string(DARKNET_PY_CUDA_LIB_DIR) + "/libcublas.so.13");
#endif
    candidates.push_back("/usr/local/cuda/lib64/libcublas.so.13");
    std::string path, tried;
    void* lib = open_first_library(candidates, &path, &tried);
    if (lib) {
        auto* api = new CublasApi();  // process lifetime, as the library stays loaded
        api->path = path;
        bool ok = bind_symbol(lib, "cublasCreate_v2", &api->cublasCreate_v2) &&
                  bind_symbol(lib, "cublasDestroy_v2", &api->cublasDestroy_v2) &&
                  bind_symbol(lib, "cublasSetStream_v2", &api->cublasSetStream_v2) &&
                  bind_symbol(lib, "cublasSetMathMode", &api->cublasSetMathMode) &&
                  bind_symbol(lib, "cublasGetProperty", &api->cublasGetProperty) &&
                  bind_symbol(lib, "cublasSetWorkspace_v2", &api->cublasSetWorkspace_v2) &&
                  bind_symbol(lib, "cublasSgemm_v2", &api->cublasSgemm_v2) &&
                  bind_symbol(lib, "cublasGemmEx", &api->cublasGemmEx);
        if (ok) return api;
        *why = path + " lacks a cuBLAS entry point this build uses";
        delete api;
        return nullptr;
    }
    *why = "cuBLAS not found (tried " + tried + "; set DARKNET_PY_CUBLAS_LIBRARY)";
    return nullptr;
}

}  // namespace

std::string CublasApi::version() const {
    int v[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) cublasGetProperty(i, &v[i]);
    return std::to_string(v[0]) + "." + std::to_string(v[1]) + "." + std::to_string(v[2]);
}

const CublasApi* cublas_api(std::string* why) {
    static std::once_flag once;
    static CublasApi* api = nullptr;
    static std::string reason;
    std::call_once(once, [] { api = open_cublas(&reason); });
    if (!api && why) *why = reason;
    return api;
}

}  // namespace dn
