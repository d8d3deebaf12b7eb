// Device entry point of detection's decode (helpers and the record: yolo_decode.h). One launch per
// head after `counts` is zeroed: one thread per prediction (batch * anchors_used * plane); a
// candidate takes the next slot of its image with an atomic increment and writes its record there.
//
// Compaction by an atomic counter per image rather than a deterministic two-pass scan: one launch,
// every thread independent (no group-size or barrier assumptions), and a scan buys nothing here:
// the slot order is the only nondeterminism, the host sorts each image's few records by their flat
// index (Darknet's order) anyway, and every record's contents are the same on every run.
#pragma once
#include "yolo_decode.h"

KERNEL(yolo_candidates_f32)(KCBUF(float, out, 0), KCBUF(float, anchors, 1), KBUF(float, cand, 2),
                            KBUF(int, counts, 3), KARGS(YoloDecodeArgs, a, 4) KTHREAD_IDS) {
    uint i = KGID;
    uint per_image = (uint)(a.anchors_used * a.plane);
    if (i >= (uint)a.batch * per_image) return;
    int b = (int)(i / per_image), p = (int)(i % per_image);
    int n = p / a.plane, loc = p % a.plane;
    KGLOBAL const float* x = out + b * a.anchors_used * (5 + a.classes) * a.plane;
    if (!yolo_decode_is_candidate(x, a, n, loc)) return;
    int slot = KATOMIC_INC(counts + b);
    yolo_decode_write(x, anchors, a, n, loc, cand + ((size_t)b * per_image + (size_t)slot) * (size_t)a.record);
}
