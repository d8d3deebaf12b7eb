#include "nccl_api.h"

#include <cstdlib>
#include <mutex>
#include <vector>

#include "dynamic_library.h"

namespace dn {

namespace {

NcclApi* open_nccl(std::string* why) {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("DARKNET_PY_NCCL_LIBRARY")) candidates.push_back(env);
    candidates.push_back("libnccl.so.2");
    candidates.push_back("libnccl.so");
#ifdef DARKNET_PY_CUDA_LIB_DIR
    candidates.push_back(std::string(DARKNET_PY_CUDA_LIB_DIR) + "/libnccl.so.2");
#endif
    candidates.push_back("/usr/local/cuda/lib64/libnccl.so.2");
    std::string path, tried;
    void* lib = open_first_library(candidates, &path, &tried);
    if (!lib) {
        *why = "NCCL not found (tried " + tried + "; pip install nvidia-nccl-cu13, or set DARKNET_PY_NCCL_LIBRARY)";
        return nullptr;
    }
    auto* api = new NcclApi();  // process lifetime, as the library stays loaded
    api->path = path;
    bool ok = bind_symbol(lib, "ncclGetVersion", &api->ncclGetVersion) &&
              bind_symbol(lib, "ncclGetUniqueId", &api->ncclGetUniqueId) &&
              bind_symbol(lib, "ncclCommInitRank", &api->ncclCommInitRank) &&
              bind_symbol(lib, "ncclCommDestroy", &api->ncclCommDestroy) &&
              bind_symbol(lib, "ncclCommAbort", &api->ncclCommAbort) &&
              bind_symbol(lib, "ncclCommGetAsyncError", &api->ncclCommGetAsyncError) &&
              bind_symbol(lib, "ncclAllReduce", &api->ncclAllReduce) &&
              bind_symbol(lib, "ncclGroupStart", &api->ncclGroupStart) &&
              bind_symbol(lib, "ncclGroupEnd", &api->ncclGroupEnd) &&
              bind_symbol(lib, "ncclGetErrorString", &api->ncclGetErrorString);
    if (ok) return api;
    *why = path + " lacks an NCCL entry point this build uses";
    delete api;
    return nullptr;
}

}  // namespace

std::string NcclApi::version() const {
    int v = 0;
    ncclGetVersion(&v);  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch (2.9 on)
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

const NcclApi* nccl_api(std::string* why) {
    static std::once_flag once;
    static NcclApi* api = nullptr;
    static std::string reason;
    std::call_once(once, [] { api = open_nccl(&reason); });
    if (!api && why) *why = reason;
    return api;
}

}  // namespace dn
