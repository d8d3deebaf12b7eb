// IoU-family box losses and their gradients with respect to the predicted box (x, y, w, h),
// as Darknet's box.c (box_giou, box_diou, box_ciou, dx_box_iou) defines them.
#pragma once
#include "box.h"

namespace dn {

enum class IouLoss { mse, iou, giou, diou, ciou };

struct BoxIous {
    float iou = 0, giou = 0, diou = 0, ciou = 0;
};

BoxIous box_ious(const Box& pred, const Box& truth);

// Darknet's dx_box_iou: the direction that increases (g/d/c)IoU, in (dx, dy, dw, dh).
Box box_iou_ascent(const Box& pred, const Box& truth, IouLoss kind);

}  // namespace dn
