// Convolution on the CPU backend: chooses between a direct GEMM (1x1 stride 1, no padding) and
// im2col + GEMM. Kept apart from cpu_backend.cpp so that fast paths (Winograd, implicit GEMM)
// can grow here without touching the other ops.
#pragma once
#include <vector>

#include "../backend.h"

namespace dn {

// y = conv(x, w) with Darknet's geometry; `workspace` is reused across calls.
void cpu_conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, Tensor& y, std::vector<float>& workspace);

}  // namespace dn
