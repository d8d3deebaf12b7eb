// Device entry points of the YOLO loss (helpers and pass order: yolo_loss.h). Three launches per
// head, in this order:
//   yolo_loss_objectness_f32  one thread per prediction (batch * anchors_used * plane): pass (1)
//   yolo_loss_truths_f32      one thread per image (batch): pass (2), its truths in Darknet's order
//   yolo_loss_finish_f32      one group per image: pass (3) per prediction, and the image's sums of
//                             squared deltas and objectness as a fixed-order tree (deterministic)
// Each thread writes only its own prediction's (or image's) entries: no atomics, no races.
#pragma once
#include "group_sum.h"
#include "yolo_loss.h"

KERNEL(yolo_loss_objectness_f32)(KCBUF(float, out, 0), KCBUF(float, truths, 1), KCBUF(float, anchors, 2),
                                 KBUF(float, delta, 3), KARGS(YoloLossArgs, a, 4) KTHREAD_IDS) {
    uint i = KGID;
    uint per_image = (uint)(a.anchors_used * a.plane);
    if (i >= (uint)a.batch * per_image) return;
    int b = (int)(i / per_image), p = (int)(i % per_image);
    int sample = a.anchors_used * (5 + a.classes) * a.plane;
    yolo_objectness_pass(out + b * sample, truths + b * a.truth_rows * 5, anchors, a, delta + b * sample,
                         p / a.plane, p % a.plane);
}

KERNEL(yolo_loss_truths_f32)(KCBUF(float, out, 0), KCBUF(float, truths, 1), KCBUF(float, anchors, 2),
                             KBUF(float, delta, 3), KBUF(float, stats, 4), KARGS(YoloLossArgs, a, 5) KTHREAD_IDS) {
    uint b = KGID;
    if (b >= (uint)a.batch) return;
    int sample = a.anchors_used * (5 + a.classes) * a.plane;
    yolo_truth_pass(out + b * sample, truths + b * a.truth_rows * 5, anchors, a, delta + b * sample,
                    stats + b * YOLO_LOSS_STATS);
}

// Grid: exactly `batch` groups of a power-of-two size <= 256.
KERNEL(yolo_loss_finish_f32)(KCBUF(float, out, 0), KBUF(float, delta, 1), KBUF(float, stats, 2),
                             KARGS(YoloLossArgs, a, 3) KTHREAD_IDS) {
    KSHARED float partial[256];
    int b = (int)KGROUP, per_image = a.anchors_used * a.plane;
    int sample = a.anchors_used * (5 + a.classes) * a.plane;
    float squares = 0.0f, anyobj = 0.0f;
    for (int p = (int)KLID; p < per_image; p += (int)KGROUP_SIZE) {
        int n = p / a.plane, loc = p % a.plane;
        squares += yolo_finish_prediction(delta + b * sample, a, n, loc);
        anyobj += yolo_finite_or_zero(out[b * sample + yolo_index(a, n, loc, 4)]);
    }
    GROUP_SUM(partial, squares)
    GROUP_SUM(partial, anyobj)
    if (KLID == 0) {
        stats[b * YOLO_LOSS_STATS + YOLO_STAT_SQUARES] = squares;
        stats[b * YOLO_LOSS_STATS + YOLO_STAT_ANYOBJ] = anyobj;
    }
}
