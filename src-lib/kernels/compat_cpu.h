// Single-source kernels (after Blender Cycles): bodies in kernels/*.h are written once against
// these macros. On the CPU a kernel helper is an inline function called from a parallel loop;
// compat_opencl.h (and the CUDA and Metal preludes) turn the same text into device entry points.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#define KFN inline
#define KGLOBAL
#define KCONST const
#define KARGS_PARAM(T) T  // an argument struct handed to a helper (a reference in MSL)
#define KSTATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define KNAMESPACE_BEGIN namespace dn {
#define KNAMESPACE_END }
#define FLT_MAX_K 3.402823466e+38f
// activation_math.h's fast forms: the accurate ones on the CPU
#define KFAST_EXP(x) std::exp(x)
#define KFAST_DIV(a, b) ((a) / (b))
typedef unsigned int uint;
using std::atan;
using std::exp;
using std::fabs;
using std::floor;
using std::fmax;
using std::fmin;
using std::isfinite;
using std::log;
using std::pow;
using std::sqrt;
using std::tanh;
