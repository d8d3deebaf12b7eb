// See loader_boxes.h. Built with -ffp-contract=off (CMakeLists.txt): `x * scale - shift` must round the
// product before the subtraction, as NumPy's two array operations did. Each line names the NumPy step of
// the former augment.correct_truth it reproduces (src-test/test_loader_boxes.py keeps that code and
// compares the two on random and edge-case boxes, bit for bit).
#include "loader_boxes.h"

#include <algorithm>

namespace dn {
namespace {

// np.minimum(np.maximum(v, 0), 1): v first in each, so a NaN stays NaN as NumPy's does
inline float clip01(float v) { return std::min(std::max(v, 0.0f), 1.0f); }

}  // namespace

int correct_boxes(const float* boxes, int n, const BoxCrop& c, int max_boxes, float* out) {
    // the factors: Python floats (double arithmetic), then np.array(..., np.float32)
    const float scale_x = (float)((double)c.ow / c.swidth), scale_y = (float)((double)c.oh / c.sheight);
    const float shift_x = (float)(((double)c.pleft / c.ow) / ((double)c.swidth / c.ow));
    const float shift_y = (float)(((double)c.ptop / c.oh) / ((double)c.sheight / c.oh));
    // `out[:, 3] >= 1.0 / net_w`: NumPy 2 compares a float32 array with a Python float in float32
    const float min_w = (float)(1.0 / c.net_w), min_h = (float)(1.0 / c.net_h);
    const int considered = max_boxes >= 0 ? std::min(n, max_boxes) : std::max(0, n + max_boxes);  // out[:max_boxes]
    int kept = 0;
    for (int i = 0; i < considered; ++i) {
        const float* b = boxes + 5 * i;
        const float cx = b[1], cy = b[2], half_w = b[3] / 2, half_h = b[4] / 2;  // b[:, 3:5] / 2
        float left = cx - half_w, top = cy - half_h, right = cx + half_w, bot = cy + half_h;  // low, high
        const bool invalid = (cx == 0 && cy == 0) || right < 0 || bot < 0 || left > 1 || top > 1;
        left = left * scale_x - shift_x, top = top * scale_y - shift_y;  // low * scale - shift
        right = right * scale_x - shift_x, bot = bot * scale_y - shift_y;
        if (c.flip) {
            const float mirrored_left = 1 - right;
            right = 1 - left, left = mirrored_left;
        }
        left = clip01(left), top = clip01(top), right = clip01(right), bot = clip01(bot);
        const float x = (left + right) / 2, y = (top + bot) / 2;  // (low + high) / 2
        const float w = clip01(right - left), h = clip01(bot - top);
        if (invalid || !(w >= min_w) || !(h >= min_h) || !(x > 0) || !(x <= 1) || !(y > 0) || !(y <= 1)) continue;
        float* o = out + 5 * kept++;
        o[0] = b[0], o[1] = x, o[2] = y, o[3] = w, o[4] = h;
    }
    return kept;
}

}  // namespace dn
