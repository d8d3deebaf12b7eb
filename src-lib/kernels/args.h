// Argument structs shared by host code and kernels; fixed-size fields only so that Metal and
// CUDA see the same layout (checked by static_asserts).
#pragma once
#include <cstdint>

namespace dn {

struct Im2colArgs {
    int32_t channels, height, width;
    int32_t kh, kw, pad, stride_y, stride_x, dilation;
    int32_t out_h, out_w;
};
static_assert(sizeof(Im2colArgs) == 11 * 4, "Im2colArgs layout");

struct YoloArgs {
    int32_t plane;     // h * w
    int32_t entries;   // 5 + classes
    int32_t new_coords;
    float scale_x_y;
};
static_assert(sizeof(YoloArgs) == 16, "YoloArgs layout");

}  // namespace dn
