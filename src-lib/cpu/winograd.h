// Winograd convolution F(m x m, 3 x 3) for 3x3 stride-1 layers (Lavin & Gray 2015): per output
// tile of m x m pixels, (m+2)^2 multiplications per input/output channel pair instead of 9 m^2
// (F(4,3): 36 instead of 144; F(2,3): 16 instead of 36). The (m+2)^2 products are independent
// GEMMs over the channels, run with the shared register tile; the folded batch norm and the
// activation are applied in the output transform, so the layer still writes its output once.
#pragma once
#include "isa.h"
#include <vector>

#include "../backend.h"
#include "microkernel.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set

// The output tile size m (4 or 2) cpu_conv2d should use for this layer, 0 for none (not 3x3
// stride 1, or too small to pay for the transforms). DARKNET_PY_CONV_PATH=gemm|winograd-f2|
// winograd-f4 forces a path where it applies (tests use it to cover every path on every shape).
// filters_kept: the layer's transformed filters are kept between calls (WinogradFilters), so a call
// pays no filter transform.
int winograd_tile(const Shape& x, const ConvGeom& g, const Shape& y, bool filters_kept = false);

// One layer's filters transformed for F(m x m, 3 x 3), kept between calls by a caller that knows when the
// weights change: it clears `current` then, and the next call transforms them again. `steady`: the
// weights did not change since the last call (inference), so keeping them pays; in training they change
// every step and each call transforms them itself (cpu_conv2d).
struct WinogradFilters {
    std::vector<float> u;
    int m = 0;
    bool current = false;
    bool steady = true;
};

// y = epilogue(conv3x3(x, w)) with Winograd F(m x m, 3 x 3); winograd_tile must have allowed it.
void winograd_conv3x3(int m, const Tensor& x, const Tensor& w, const ConvGeom& g, const Epilogue& e, Tensor& y,
                      std::vector<float>& padded, std::vector<float>& u, WinogradFilters* kept = nullptr);

}  // namespace DARKNET_ISA
}  // namespace dn
