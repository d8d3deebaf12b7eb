// Boxes as Darknet keeps them: centre x, y and width, height, relative to the image (0..1).
#pragma once
#include <algorithm>
#include <cmath>

namespace dn {

struct Box {
    float x = 0, y = 0, w = 0, h = 0;
};

inline float overlap_1d(float c1, float w1, float c2, float w2) {
    float left = std::max(c1 - w1 / 2, c2 - w2 / 2);
    float right = std::min(c1 + w1 / 2, c2 + w2 / 2);
    return right - left;
}

inline float box_intersection(const Box& a, const Box& b) {
    float w = overlap_1d(a.x, a.w, b.x, b.w), h = overlap_1d(a.y, a.h, b.y, b.h);
    if (w <= 0 || h <= 0) return 0;
    return w * h;
}

inline float box_iou(const Box& a, const Box& b) {
    float i = box_intersection(a, b);
    float u = a.w * a.h + b.w * b.h - i;
    if (i == 0 || u == 0) return 0;
    return i / u;
}

// IoU minus the normalised centre distance to the power beta (Darknet's box_diounms).
inline float box_diou_nms(const Box& a, const Box& b, float beta) {
    float left = std::min(a.x - a.w / 2, b.x - b.w / 2), right = std::max(a.x + a.w / 2, b.x + b.w / 2);
    float top = std::min(a.y - a.h / 2, b.y - b.h / 2), bot = std::max(a.y + a.h / 2, b.y + b.h / 2);
    float w = right - left, h = bot - top;
    float c = w * w + h * h;
    float iou = box_iou(a, b);
    if (c == 0) return iou;
    float d = (a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y);
    return iou - std::pow(d / c, beta);
}

}  // namespace dn
