// cuBLAS, opened at run time (dlopen) so the module builds with nothing but nvcc and cudart and
// still loads where cuBLAS is missing (the GEMM kernel of the kernel text runs instead). The few
// entry points used are declared here by hand from cublas_api.h (CUDA 13).
#pragma once
#include <string>

#include <cuda_runtime.h>

namespace dn {

struct CublasApi {
    using Handle = struct cublasContext*;
    enum : int { kOpN = 0, kOpT = 1 };                 // cublasOperation_t
    enum : int { kDefaultMath = 0, kTf32Math = 3 };  // cublasMath_t (0 = plain fp32, no TF32)

    int (*cublasCreate_v2)(Handle*) = nullptr;
    int (*cublasDestroy_v2)(Handle) = nullptr;
    int (*cublasSetStream_v2)(Handle, cudaStream_t) = nullptr;
    int (*cublasSetMathMode)(Handle, int) = nullptr;
    int (*cublasGetProperty)(int type, int* value) = nullptr;  // type: 0 major, 1 minor, 2 patch
    int (*cublasSetWorkspace_v2)(Handle, void*, size_t) = nullptr;
    int (*cublasSgemm_v2)(Handle, int transa, int transb, int m, int n, int k, const float* alpha, const float* A,
                          int lda, const float* B, int ldb, const float* beta, float* C, int ldc) = nullptr;
    // Half matrices (fp16 / bf16: cudaDataType_t kR16F / kR16BF; C may be kR32F) with fp32 compute
    // (kCompute32F), the default algorithm (tensor cores).
    enum : int { kR32F = 0, kR16F = 2, kR16BF = 14, kCompute32F = 68, kGemmDefault = -1 };
    int (*cublasGemmEx)(Handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A, int a_type,
                        int lda, const void* B, int b_type, int ldb, const void* beta, void* C, int c_type, int ldc,
                        int compute_type, int algo) = nullptr;
    std::string path;  // the library that was opened
    std::string version() const;  // "13.1.0"
};

// The process-wide cuBLAS, or null with *why set (not found: where it looked). Looks at
// DARKNET_PY_CUBLAS_LIBRARY, then the loader's search path, then the toolkit it was built with.
const CublasApi* cublas_api(std::string* why);

}  // namespace dn
