// Single-source kernels (after Blender Cycles): bodies in kernels/*.h are written once against
// these macros. On the CPU a kernel is an inline function called from a parallel loop; the Metal
// and CUDA compat headers will turn the same text into `kernel void` / `__global__` entries.
#pragma once
#include <cmath>
#include <cstddef>

#define KFN inline
#define KGLOBAL
#define KCONST const
typedef unsigned int uint;
