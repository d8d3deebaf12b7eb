// A model of Metal's <metal_stdlib> for clang's C++ for OpenCL 2021 mode (check_msl.py): the MSL
// spellings our kernel text uses, mapped onto what that mode checks natively, so that clang finds in
// metal_source() the mistakes Apple's compiler would reject. Not a Metal implementation: declarations
// only (the text is parsed and type-checked, never compiled to code).
//
//   address spaces  device -> __global, threadgroup -> __local, thread -> __private; `constant` is
//                   the mode's own keyword (__constant). Pointer conversions between them, writes to
//                   constant data and threadgroup variables outside kernel scope are then errors.
//   types           MSL's built-in scalar names (half included) and the vector types (clang ext vectors:
//                   wrong widths, components and conversions are errors, as in MSL).
//   namespace metal the math, barrier and atomic functions, declared for float only (what MSL has
//                   for our use), and MSL names we do not use, so that a helper of ours that reuses
//                   one of them is ambiguous here as under `using namespace metal` on the Mac.
//   attributes      [[buffer(i)]] and the thread-id attributes become clang::annotate("msl_...")
//                   (check_msl.py reads them back to check indices); any other attribute is unknown
//                   to clang, and check_msl.py makes that warning an error (a misspelling).
#pragma once

#define device __global
#define threadgroup __local
#define thread __private
// kernel functions are marked for check_msl.py, which checks their parameters' attributes
#define kernel __kernel __attribute__((annotate("msl_kernel")))

// MSL attributes that check_msl.py knows. Function-like `buffer` only expands where followed by `(`.
#define buffer(index) clang::annotate("msl_buffer(" #index ")")
#define thread_position_in_grid clang::annotate("msl_thread_position_in_grid")
#define thread_position_in_threadgroup clang::annotate("msl_thread_position_in_threadgroup")
#define threadgroup_position_in_grid clang::annotate("msl_threadgroup_position_in_grid")
#define threads_per_threadgroup clang::annotate("msl_threads_per_threadgroup")
#define threads_per_grid clang::annotate("msl_threads_per_grid")
#define threadgroups_per_grid clang::annotate("msl_threadgroups_per_grid")
#define thread_index_in_threadgroup clang::annotate("msl_thread_index_in_threadgroup")
#define thread_index_in_simdgroup clang::annotate("msl_thread_index_in_simdgroup")
#define simdgroup_index_in_threadgroup clang::annotate("msl_simdgroup_index_in_threadgroup")
#define threads_per_simdgroup clang::annotate("msl_threads_per_simdgroup")

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef unsigned long size_t;

#define DN_MSL_VECTORS(T)                                \
    typedef T T##2 __attribute__((ext_vector_type(2))); \
    typedef T T##3 __attribute__((ext_vector_type(3))); \
    typedef T T##4 __attribute__((ext_vector_type(4)));
DN_MSL_VECTORS(float)
DN_MSL_VECTORS(int)
DN_MSL_VECTORS(uint)
DN_MSL_VECTORS(short)
DN_MSL_VECTORS(ushort)
DN_MSL_VECTORS(char)
DN_MSL_VECTORS(uchar)
#undef DN_MSL_VECTORS

// MSL's `half` is a native type (loads, stores, arithmetic); in this mode that is cl_khr_fp16
// (check_msl.py declares the extension to clang).
#pragma OPENCL EXTENSION cl_khr_fp16 : enable

#define FLT_MAX 0x1.fffffep127f
#define INFINITY __builtin_huge_valf()
#define NAN __builtin_nanf("")

namespace metal {

// ---- math (float; MSL also has half and vector overloads, which our text does not use) ----
// metal::fast and metal::precise hold the same functions in their fast and precise forms (MSL's math
// functions section); the kernel text calls fast::exp and fast::divide in half storage (KFAST_*)
namespace fast {
float exp(float x);
float divide(float x, float y);
}  // namespace fast
namespace precise {
float exp(float x);
float divide(float x, float y);
}  // namespace precise
float exp(float x);
float divide(float x, float y);
float exp2(float x);
float log(float x);
float log2(float x);
float sqrt(float x);
float rsqrt(float x);
float tanh(float x);
float atan(float x);
float atan2(float y, float x);
float sin(float x);
float cos(float x);
float fabs(float x);
float abs(float x);
int abs(int x);
float floor(float x);
float ceil(float x);
float round(float x);
float trunc(float x);
float pow(float x, float y);
float powr(float x, float y);
float fmax(float x, float y);
float fmin(float x, float y);
float fma(float a, float b, float c);
float fmod(float x, float y);
float max(float x, float y);
int max(int x, int y);
uint max(uint x, uint y);
float min(float x, float y);
int min(int x, int y);
uint min(uint x, uint y);
float clamp(float x, float lo, float hi);
int clamp(int x, int lo, int hi);
float mix(float x, float y, float a);
float step(float edge, float x);
float sign(float x);
float saturate(float x);
float select(float a, float b, bool c);
float dot(float2 a, float2 b);
float dot(float3 a, float3 b);
float dot(float4 a, float4 b);
float length(float2 v);
float length(float3 v);
float length(float4 v);
bool isfinite(float x);
bool isinf(float x);
bool isnan(float x);

// ---- reinterpretation: MSL's as_type<T>(x) needs T and x of one size (the half storage macros) ----
template <typename T, typename U>
T as_type(U x) {
    static_assert(sizeof(T) == sizeof(U), "as_type between types of different sizes");
    return __builtin_bit_cast(T, x);
}

// ---- synchronisation ----
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);

// ---- atomics: objects of atomic types only, in device or threadgroup memory ----
// (atomic_int and atomic_uint are this mode's built-in atomic types, as in MSL: plain ints are not)
enum memory_order { memory_order_relaxed };
int atomic_fetch_add_explicit(volatile device atomic_int* object, int operand, memory_order order);
int atomic_fetch_add_explicit(volatile threadgroup atomic_int* object, int operand, memory_order order);
uint atomic_fetch_add_explicit(volatile device atomic_uint* object, uint operand, memory_order order);
uint atomic_fetch_add_explicit(volatile threadgroup atomic_uint* object, uint operand, memory_order order);
int atomic_load_explicit(volatile device atomic_int* object, memory_order order);
void atomic_store_explicit(volatile device atomic_int* object, int desired, memory_order order);

}  // namespace metal
