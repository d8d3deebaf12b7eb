// The kernel text's macros for the Metal Shading Language, 2.x and 3.0 (prepended to the embedded
// text by kernel_source("metal"); the rules for writing kernel text are at the top of compat_opencl.h).
//
// Compile options are the device's job, not this text's: MetalDevice compiles with fast math off
// (MTLCompileOptions.fastMathEnabled = NO; mathMode = MTLMathModeSafe where available), since fast
// math would change exp/log/tanh results and NaN handling against the CPU backends. MSL has no
// portable way to forbid contracting a*b+c into one FMA (OpenCL's FP_CONTRACT OFF); where the
// compiler contracts, results differ in the last bits, within the parity harness's tolerances.
//
// How each macro maps, and why:
//   KERNEL(name)     `kernel void name`: entry points are found by name in the compiled library.
//   KBUF / KCBUF     `device T* name [[buffer(i)]]`; the index is the argument's position, which is
//                    what MetalDevice passes to setBuffer:offset:atIndex:.
//   KARGS            `constant T& name [[buffer(i)]]`: MSL takes no structs by value in kernel
//                    arguments; the device binds the struct's bytes with setBytes:length:atIndex:.
//   KARGS_PARAM(T)   the same struct handed on to a helper: a constant reference too, so the
//                    helper reads the argument in place (no copy out of the constant address space).
//   KTHREAD_IDS      MSL passes thread ids as attributed kernel parameters; KGID etc. name them.
//   KSHARED          `threadgroup`: every kernel declares its threadgroup arrays at kernel scope.
//   KBARRIER()       threadgroup_barrier(mem_flags::mem_threadgroup): orders threadgroup memory,
//                    as OpenCL's barrier(CLK_LOCAL_MEM_FENCE).
//   KATOMIC_INC(p)   p points to a device int; Metal's atomics need an atomic_int object, which has
//                    int's size and layout, so the pointer is cast (relaxed order: only the slot
//                    number matters, nothing else is published through it).
//   int32_t, uint32_t and uint are MSL's own scalar types: not redeclared here.
#include <metal_stdlib>
using namespace metal;

#define KERNEL(name) kernel void name
#define KBUF(T, name, index) device T* name [[buffer(index)]]
#define KCBUF(T, name, index) device const T* name [[buffer(index)]]
#define KARGS(T, name, index) constant T& name [[buffer(index)]]
#define KARGS_PARAM(T) constant T&
#define KTHREAD_IDS                                                                        \
    , uint dn_gid_ [[thread_position_in_grid]], uint dn_lid_ [[thread_position_in_threadgroup]], \
        uint dn_group_ [[threadgroup_position_in_grid]], uint dn_group_size_ [[threads_per_threadgroup]]
#define KGID dn_gid_
#define KLID dn_lid_
#define KGROUP dn_group_
#define KGROUP_SIZE dn_group_size_
#define KSHARED threadgroup
#define KBARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)
#define KATOMIC_INC(p) atomic_fetch_add_explicit((device atomic_int*)(p), 1, memory_order_relaxed)
#define KGLOBAL device
#define KCONST const
#define KFN inline
// MSL is C++14 based: the argument structs' layouts are checked on the Mac as in the C++ build.
#define KSTATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define KNAMESPACE_BEGIN
#define KNAMESPACE_END
#define FLT_MAX_K 3.402823466e+38f
// The fast exp and division activation_math.h asks for in half storage (fast math for these calls
// only: the compile options keep it off for the rest)
#define KFAST_EXP(x) fast::exp(x)
#define KFAST_DIV(a, b) fast::divide(a, b)
// Storage types (storage_kernels.h, src-lib/gpu/PRECISION.md): fp16 is MSL's half (casts round to
// nearest even); bf16 is the top 16 bits of an fp32, as ushort (MSL's `bfloat` needs Metal 3.1).
#define KF16_T half
#define KF16_LOAD(p, i) ((float)(p)[i])
#define KF16_STORE(p, i, v) ((p)[i] = (half)(v))
#define KBF16_T ushort
#define KBF16_LOAD(p, i) as_type<float>(((uint)(p)[i]) << 16)
#define KBF16_STORE(p, i, v) ((p)[i] = dn_bf16_bits(v))
// fp32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN
inline ushort dn_bf16_bits(float f) {
    uint u = as_type<uint>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
// v rounded to the storage type and back: what a load of a stored v returns
#define KF16_ROUND(v) ((float)(half)(v))
#define KBF16_ROUND(v) as_type<float>(((uint)dn_bf16_bits(v)) << 16)
