// The kernel text's macros for OpenCL C 1.2 (prepended to the embedded text by OpenCLDevice).
//
// How kernel text is written (src-lib/kernels/*.h), so that the same text is valid OpenCL C 1.2,
// CUDA C++ and MSL:
//   KERNEL(name)(KBUF(float, y, 0), KCBUF(float, x, 1), KARGS(FooArgs, a, 2) KTHREAD_IDS) { ... }
//     buffers are numbered from 0 in order, the argument struct comes last (Metal's [[buffer(i)]]);
//     KTHREAD_IDS ends the parameter list (Metal passes thread ids as parameters).
//   A helper that takes the argument struct declares it `KARGS_PARAM(FooArgs) a`: a constant
//     reference in MSL (its kernels take structs by reference only), by value in OpenCL C and C++.
//   KGID (global thread id, x), KLID (id in the group), KGROUP (group id), KGROUP_SIZE.
//   KSHARED float tile[256];  threadgroup memory, declared at kernel scope; KBARRIER() between phases.
//   KFN for helper functions; pointers in helpers are KGLOBAL (device memory).
//   KATOMIC_INC(p) for a per-image counter (see its definition), nothing else atomic.
//   C-style casts, no references, templates, overloads of our own or namespaces in kernel bodies;
//   math through the overloaded names (exp, log, sqrt, tanh, atan, fabs, fmax, fmin, pow, floor,
//   isfinite).
//   Argument structs (kernels/args.h) use int32_t/uint32_t/float fields only.
// a*b+c stays two roundings, as in the C++ backends (contracted FMAs would differ in the last bits)
#pragma OPENCL FP_CONTRACT OFF
#define KERNEL(name) __kernel void name
#define KBUF(T, name, index) __global T* name
#define KCBUF(T, name, index) __global const T* name
#define KARGS(T, name, index) const T name
#define KARGS_PARAM(T) T
#define KTHREAD_IDS
#define KGID ((uint)get_global_id(0))
#define KLID ((uint)get_local_id(0))
#define KGROUP ((uint)get_group_id(0))
#define KGROUP_SIZE ((uint)get_local_size(0))
#define KSHARED __local
#define KBARRIER() barrier(CLK_LOCAL_MEM_FENCE)
// KATOMIC_INC(p): atomically p[0] += 1 on a __global int, returns the old value (compaction slots).
//   OpenCL C 1.2: atomic_inc(p); CUDA: atomicAdd(p, 1); MSL: atomic_fetch_add_explicit(
//   (device atomic_int*)p, 1, memory_order_relaxed) (the buffer is device atomic_int there).
#define KATOMIC_INC(p) atomic_inc(p)
#define KGLOBAL __global
#define KCONST const
#define KFN inline
#define KSTATIC_ASSERT(cond, msg)
#define KNAMESPACE_BEGIN
#define KNAMESPACE_END
typedef int int32_t;
typedef uint uint32_t;
#define FLT_MAX_K 3.402823466e+38f
// The fast exp and division activation_math.h asks for in half storage (the device's own precision)
#define KFAST_EXP(x) native_exp(x)
#define KFAST_DIV(a, b) native_divide(a, b)
// Storage types (storage_kernels.h, src-lib/gpu/PRECISION.md). fp16 goes through vload_half /
// vstore_half_rte, which OpenCL C 1.2 has without cl_khr_fp16: the kernels never compute in half
// (math is fp32), so every OpenCL device stores fp16. bf16 is the top 16 bits of an fp32, as ushort.
#define KF16_T half
#define KF16_LOAD(p, i) vload_half((size_t)(i), (p))
#define KF16_STORE(p, i, v) vstore_half_rte((v), (size_t)(i), (p))
#define KBF16_T ushort
#define KBF16_LOAD(p, i) as_float(((uint)(p)[i]) << 16)
#define KBF16_STORE(p, i, v) ((p)[i] = dn_bf16_bits(v))
// fp32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN
inline ushort dn_bf16_bits(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
// v rounded to the storage type and back: what a load of a stored v returns (fp16 through a private
// word: OpenCL C 1.2 has half pointers but no half values)
inline float dn_f16_round(float v) {
    ushort r;
    vstore_half_rte(v, 0, (half*)&r);
    return vload_half(0, (const half*)&r);
}
#define KF16_ROUND(v) dn_f16_round(v)
#define KBF16_ROUND(v) as_float(((uint)dn_bf16_bits(v)) << 16)
