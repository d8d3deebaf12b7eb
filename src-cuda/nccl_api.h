// NCCL, opened at run time (dlopen) as cuBLAS is (cublas_api.h): the module builds without it and
// trains on one device without it. The few entry points used are declared here by hand from nccl.h
// (NCCL 2.x; checked against nvidia-nccl-cu13's nccl.h).
#pragma once
#include <cstddef>
#include <string>

#include <cuda_runtime.h>

namespace dn {

struct NcclApi {
    using Comm = struct ncclComm*;                             // ncclComm_t
    enum : int { kUniqueIdBytes = 128 };                       // NCCL_UNIQUE_ID_BYTES
    struct UniqueId { char internal[kUniqueIdBytes]; };        // ncclUniqueId
    enum : int { kSuccess = 0, kInProgress = 7 };              // ncclResult_t
    enum : int { kFloat32 = 7 };                               // ncclDataType_t (ncclFloat32)
    enum : int { kSum = 0 };                                   // ncclRedOp_t (ncclSum)

    int (*ncclGetVersion)(int* version) = nullptr;
    int (*ncclGetUniqueId)(UniqueId* id) = nullptr;
    int (*ncclCommInitRank)(Comm* comm, int nranks, UniqueId id, int rank) = nullptr;
    int (*ncclCommDestroy)(Comm comm) = nullptr;
    int (*ncclCommAbort)(Comm comm) = nullptr;
    int (*ncclCommGetAsyncError)(Comm comm, int* async_error) = nullptr;
    int (*ncclAllReduce)(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op, Comm comm,
                         cudaStream_t stream) = nullptr;
    int (*ncclGroupStart)() = nullptr;
    int (*ncclGroupEnd)() = nullptr;
    const char* (*ncclGetErrorString)(int result) = nullptr;
    std::string path;  // the library that was opened
    std::string version() const;  // "2.28.3"
};

// The process-wide NCCL, or null with *why set (not found: where it looked). Looks at
// DARKNET_PY_NCCL_LIBRARY (darknet_py.diagnostics.cuda_runtime points it at pip's nvidia-nccl-cu13), the loader's
// search path, then the toolkit it was built with.
const NcclApi* nccl_api(std::string* why);

}  // namespace dn
