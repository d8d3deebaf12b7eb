// Detection's decode of one yolo head (Darknet's get_yolo_detections before correct_yolo_boxes),
// written once: the CPU backends call these helpers in a host loop (yolo/detect.cpp
// yolo_candidates_images), the device kernel (yolo_decode_kernels.h) per thread.
//
// A candidate is a prediction (mask slot n, cell loc) whose objectness > thresh. Its record, of
// a.record = YOLO_CAND_PROB + classes floats: the box relative to the network input (yolo_get_box,
// before the letterbox correction), the objectness, the prediction's flat index loc * anchors_used + n
// (Darknet's decode order: cells outer, anchors inner; exact as a float below 2^24 predictions per
// head), then per class objectness * class probability, 0 where <= thresh.
#pragma once
#include "yolo_loss.h"
KNAMESPACE_BEGIN

// Buffers of the op: output [batch, anchors_used * (5 + classes), lh, lw]; anchors as the loss
// reads them (the 2 * num anchor sizes, then the mask as floats); candidates [batch, anchors_used *
// plane, record] (room for every prediction; image b's records start at b * anchors_used * plane);
// counts [batch] int32 (the records written per image).
typedef struct YoloDecodeArgs {
    int32_t batch; int32_t lw; int32_t lh; int32_t plane; int32_t anchors_used; int32_t classes;
    int32_t num; int32_t netw; int32_t neth; int32_t new_coords; int32_t record; float thresh;
} YoloDecodeArgs;
KSTATIC_ASSERT(sizeof(YoloDecodeArgs) == 48, "YoloDecodeArgs layout");

#define YOLO_CAND_BOX 0    // x, y, w, h
#define YOLO_CAND_OBJ 4
#define YOLO_CAND_INDEX 5  // loc * anchors_used + n
#define YOLO_CAND_PROB 6   // classes floats

// Whether prediction (n, loc) of one image's block x is a candidate (NaN objectness is not).
KFN int yolo_decode_is_candidate(KGLOBAL const float* x, KARGS_PARAM(YoloDecodeArgs) a, int n, int loc) {
    return x[(n * (5 + a.classes) + 4) * a.plane + loc] > a.thresh ? 1 : 0;
}

// Writes the record of candidate (n, loc) of one image's block x to rec.
KFN void yolo_decode_write(KGLOBAL const float* x, KGLOBAL const float* anchors, KARGS_PARAM(YoloDecodeArgs) a, int n, int loc,
                           KGLOBAL float* rec) {
    int base = n * (5 + a.classes) * a.plane + loc;
    YoloBox b = yolo_get_box(x, anchors, (int)anchors[2 * a.num + n], base, loc % a.lw, loc / a.lw, a.lw, a.lh,
                             a.netw, a.neth, a.plane, a.new_coords);
    float obj = x[base + 4 * a.plane];
    rec[YOLO_CAND_BOX] = b.x;
    rec[YOLO_CAND_BOX + 1] = b.y;
    rec[YOLO_CAND_BOX + 2] = b.w;
    rec[YOLO_CAND_BOX + 3] = b.h;
    rec[YOLO_CAND_OBJ] = obj;
    rec[YOLO_CAND_INDEX] = (float)(loc * a.anchors_used + n);
    for (int j = 0; j < a.classes; ++j) {
        float p = obj * x[base + (5 + j) * a.plane];
        rec[YOLO_CAND_PROB + j] = p > a.thresh ? p : 0.0f;
    }
}

KNAMESPACE_END
