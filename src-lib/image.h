// Image preprocessing as Darknet does it: planar RGB floats in [0,1], resized with Darknet's
// own bilinear filter (corner-aligned, two passes; not cv2.resize), or letterboxed on grey 0.5.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dn {

struct PlanarImage {
    int w = 0, h = 0, c = 0;
    std::vector<float> data;  // c planes of h x w
};

// BGR (or grey) uint8 interleaved rows, as OpenCV returns them -> planar RGB / 255.
PlanarImage from_bgr_u8(const uint8_t* pixels, int w, int h, int channels, size_t row_stride);

// Darknet's resize_image.
PlanarImage resize_darknet(const PlanarImage& im, int w, int h);

// Darknet's letterbox_image: keep aspect, centre on a 0.5 grey canvas.
PlanarImage letterbox_darknet(const PlanarImage& im, int w, int h);

}  // namespace dn
