// Convolution on the CPU backend, with the folded batch norm and the activation fused into the
// GEMM epilogue. Paths: Winograd F(4,3)/F(2,3) for 3x3 stride-1 layers where it pays
// (winograd.h), else an implicit GEMM whose B panels are packed straight from the (zero-padded)
// image: no im2col buffer, and for 1x1 stride-1 layers B is the image itself.
// Kept apart from cpu_backend.cpp so the fast paths do not touch the other ops.
#pragma once
#include "isa.h"
#include <vector>

#include "../backend.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

struct WinogradFilters;  // winograd.h

// Reusable buffers of one backend, grown as needed.
struct ConvWorkspace {
    std::vector<float> padded, transformed;  // padded or split input; Winograd-transformed filters or inputs
};

// y = act(conv(x, w) * scale[c] + shift[c]); scale null = 1, shift null = no affine.
// kept: where the caller keeps this layer's Winograd filters between calls (null: transformed every call).
void cpu_conv2d(const Tensor& x, const Tensor& w, const ConvGeom& g, const float* scale, const float* shift,
                Activation act, Tensor& y, ConvWorkspace& ws, WinogradFilters* kept = nullptr);

}  // namespace DARKNET_ISA
}  // namespace dn
