// The training loader's last pass over one sample's pixels, fused: Darknet's HSV jitter (OpenCV's
// 8-bit BGR -> HSV, the per-image hue/saturation/exposure tables, HSV -> RGB) and the copy of the
// uint8 HWC image into its float32 planar RGB batch row (x / 255, as Darknet's mat_to_image).
// One read of the image and one write of the row, instead of three OpenCV passes and a copy.
// Built once per instruction set with the CPU kernels (loader_pixels.cpp, isa.h) and reached through
// cpu_isa(): on a 2-core AMD EPYC, a decoded 416x416 JPEG into a float32 batch row takes 0.48 ms in the
// AVX2 copy (its HSV round trip in intrinsics, loader_hsv_avx2.h; 0.57 ms as GCC vectorised the plain
// loops, 0.73-0.91 ms before the bytes were split with byte shuffles), 1.5 ms in the x86-64 baseline's
// (SSE2), with the horizontal flip on the way (flip) for free. The row may be written in a half type instead
// (dst_type fp16 / bf16: a training batch in the network's storage type, half the bytes).
#pragma once
#include <cstddef>
#include <cstdint>

#include "../tensor.h"

namespace dn {

struct PixelsIntoBatch {
    // h rows of w pixels, `channels` (1 or 3) interleaved uint8 each, rows `src_row_stride` bytes
    // apart; bgr: the 3 channels are B, G, R (as OpenCV decodes) rather than R, G, B.
    const uint8_t* src;
    int w, h, channels;
    ptrdiff_t src_row_stride;
    bool bgr;
    // the row written right to left: the horizontal flip of the image
    bool flip;
    // nullptr (no jitter: a plain copy) or 256 x 3 uint8: row x holds the new hue, saturation and
    // value of x (augment._hsv_lut's layout; a grey image uses the value column only)
    const uint8_t* tables;
    // `channels` planes of h rows of w values, in R, G, B order for 3 channels; rows `dst_row_stride`
    // values apart, planes `dst_plane_stride` (a batch row, or a window of one: a mosaic quadrant).
    // dst_type fp32: floats; fp16 / bf16: uint16 holding the half of each float (half_convert.h's rounding,
    // to nearest even: the bits the device's own conversion of the float row gives).
    void* dst;
    ptrdiff_t dst_row_stride, dst_plane_stride;
    DType dst_type = DType::f32;
};

// The pass, in the copy of the CPU kernels cpu_isa() chose (cpu_isa.cpp); throws DarknetError as
// cpu_isa() does when DARKNET_PY_ISA names a copy that cannot run.
void pixels_into_batch(const PixelsIntoBatch& p);

}  // namespace dn
