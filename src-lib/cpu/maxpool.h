// Max pooling forward on the CPU backend, as a separable max: per output row, the column-wise max
// of the window's input rows (contiguous vector work), then the max along each window of that row.
// Outputs whose window lies inside the image take no bounds work; the border ones clip their
// window. Same results as the general loop (reference backend): windows start at -padding/2, the
// max starts from -FLT_MAX (an empty window gives -FLT_MAX) and NaN inputs are skipped.
#pragma once
#include "isa.h"

#include "../backend.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

void maxpool_forward(const Tensor& x, const PoolGeom& g, Tensor& y);

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
