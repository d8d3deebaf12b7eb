// The kernel text's macros for CUDA C++ (prepended to the embedded text; the build compiles the
// result with nvcc into a fatbin that CudaDevice loads, see src-cuda/README.md). The rules for
// writing kernel text are at the top of compat_opencl.h.
//
// Kernels are extern "C" so CudaDevice finds them by their plain name (cudaLibraryGetKernel).
// The build passes --fmad=false: a*b+c stays two roundings, as in the C++ backends and OpenCL's
// FP_CONTRACT OFF (a contracted FMA would differ in the last bits).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define KERNEL(name) extern "C" __global__ void name
#define KBUF(T, name, index) T* name
#define KCBUF(T, name, index) const T* name
#define KARGS(T, name, index) const T name
#define KARGS_PARAM(T) T
#define KTHREAD_IDS
#define KGID ((uint)(blockIdx.x * blockDim.x + threadIdx.x))
#define KLID ((uint)threadIdx.x)
#define KGROUP ((uint)blockIdx.x)
#define KGROUP_SIZE ((uint)blockDim.x)
#define KSHARED __shared__
#define KBARRIER() __syncthreads()
#define KATOMIC_INC(p) atomicAdd((p), 1)
#define KGLOBAL
#define KCONST const
#define KFN __device__ inline
#define KSTATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define KNAMESPACE_BEGIN
#define KNAMESPACE_END
typedef unsigned int uint;
typedef int int32_t;
typedef unsigned int uint32_t;
#define FLT_MAX_K 3.402823466e+38f
// The fast exp and division activation_math.h asks for in half storage: ex2.approx and rcp.approx
#define KFAST_EXP(x) __expf(x)
#define KFAST_DIV(a, b) __fdividef(a, b)
// Storage types (storage_kernels.h, src-lib/gpu/PRECISION.md): CUDA's own __half and __nv_bfloat16
// (what cuBLAS and cuDNN take), converted with round to nearest even.
#define KF16_T __half
#define KF16_LOAD(p, i) __half2float((p)[i])
#define KF16_STORE(p, i, v) ((p)[i] = __float2half_rn(v))
#define KBF16_T __nv_bfloat16
#define KBF16_LOAD(p, i) __bfloat162float((p)[i])
#define KBF16_STORE(p, i, v) ((p)[i] = __float2bfloat16_rn(v))
// v rounded to the storage type and back: what a load of a stored v returns
#define KF16_ROUND(v) __half2float(__float2half_rn(v))
#define KBF16_ROUND(v) __bfloat162float(__float2bfloat16_rn(v))
