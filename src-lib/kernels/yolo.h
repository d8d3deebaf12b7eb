// The yolo head's activation for element i of one sample: logistic on x, y, objectness and
// classes (unless new_coords), then x, y scaled around 0.5 by scale_x_y.
#pragma once
#include "args.h"
#include "compat_cpu.h"

namespace dn {

KFN float yolo_activate_one(uint i, float v, KCONST YoloArgs& a) {
    int entry = (int)(i / a.plane) % a.entries;
    if (!a.new_coords && entry != 2 && entry != 3) v = 1.0f / (1.0f + expf(-v));
    if (entry < 2) v = v * a.scale_x_y - 0.5f * (a.scale_x_y - 1.0f);
    return v;
}

}  // namespace dn
