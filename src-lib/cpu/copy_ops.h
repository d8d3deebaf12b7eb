// Data movement of the CPU backend's routes and upsample: memory-bound loops, spread over the
// thread pool once they are large enough for a second core's bandwidth to pay for waking it.
#pragma once
#include <cstddef>

#include "isa.h"

#include "../backend.h"

namespace dn {
inline namespace DARKNET_ISA {  // isa.h: one copy per instruction set
namespace cpu {

// Copies `samples` blocks of `block` floats: block n from src + n * src_stride to dst + n * dst_stride
// (a route's channel range, one block per sample).
void copy_blocks(const float* src, size_t src_stride, float* dst, size_t dst_stride, size_t block, size_t samples);

// Nearest-neighbour upsample by `stride` (y is x.h * stride by x.w * stride), times `scale`.
void upsample_nearest(const Tensor& x, int stride, float scale, Tensor& y);

}  // namespace cpu
}  // namespace DARKNET_ISA
}  // namespace dn
