// The YOLO loss (Darknet's forward_yolo_layer, training part), written once: the CPU backends call
// these helpers in host loops (yolo/loss.cpp yolo_loss_image), the device kernels
// (yolo_loss_kernels.h) call them per thread. All pointers are one image's block of the head.
//
// Darknet's per-image order is kept: (1) every prediction on its own: no-object delta, ignore /
// truth thresholds; (2) every truth in order: its best anchor (and, with iou_thresh < 1, others)
// gets box, objectness and class deltas; later truths see earlier ones' deltas (a cell with two
// truths), so one image's truths run in one sequential loop; (3) every prediction on its own:
// average of the box delta over positive classes, sign flip and the sum of squares.
// Passes (1) and (3) touch only their own prediction's entries: one thread per prediction is safe.
#pragma once
#include "yolo_loss_box.h"
KNAMESPACE_BEGIN

// The head and its [yolo] options. Named (not only typedef'd) so that backend.h can declare it.
// Buffers of the op: output and delta [batch, anchors_used * (5 + classes), lh, lw]; truths
// [batch, truth_rows, 5] (x, y, w, h, class; rows with a class outside 0..classes-1 are skipped,
// at most max_boxes used); anchors: the 2 * num anchor sizes (pixels), then the mask (anchors_used
// anchor indices, as floats); stats [batch, YOLO_LOSS_STATS].
typedef struct YoloLossArgs {
    int32_t batch; int32_t lw; int32_t lh; int32_t plane; int32_t anchors_used; int32_t classes;
    int32_t num; int32_t truth_rows; int32_t max_boxes; int32_t netw; int32_t neth;
    int32_t new_coords; int32_t iou_loss; int32_t objectness_smooth; int32_t focal_loss;
    float ignore_thresh; float truth_thresh; float iou_thresh; float iou_normalizer; float obj_normalizer;
    float label_smooth_eps; float max_delta;
} YoloLossArgs;
KSTATIC_ASSERT(sizeof(YoloLossArgs) == 88, "YoloLossArgs layout");

// Per-image partial sums in the stats buffer, reduced on the host into YoloLossStats.
#define YOLO_LOSS_STATS 8
#define YOLO_STAT_SQUARES 0   // sum of squared deltas (Darknet's cost)
#define YOLO_STAT_ANYOBJ 1    // objectness over all predictions
#define YOLO_STAT_IOU 2       // IoU of assigned predictions with their truths
#define YOLO_STAT_OBJ 3       // objectness at assigned predictions
#define YOLO_STAT_CLASS 4     // probability of the true class at assigned predictions
#define YOLO_STAT_COUNT 5     // assigned (truth, anchor) pairs
#define YOLO_STAT_RECALL50 6
#define YOLO_STAT_RECALL75 7

KFN int yolo_index(KARGS_PARAM(YoloLossArgs) a, int n, int loc, int entry) {
    return n * a.plane * (5 + a.classes) + entry * a.plane + loc;
}

KFN float yolo_finite_or_zero(float v) { return isfinite(v) ? v : 0.0f; }

// Darknet's get_yolo_box: anchor `anchor` at cell (col, row) of outputs starting at x[index],
// entries `stride` apart; relative to the network input. detect.cpp decodes with it too.
KFN YoloBox yolo_get_box(KGLOBAL const float* x, KGLOBAL const float* anchors, int anchor, int index, int col,
                         int row, int lw, int lh, int netw, int neth, int stride, int new_coords) {
    YoloBox b;
    b.x = ((float)col + x[index]) / (float)lw;
    b.y = ((float)row + x[index + stride]) / (float)lh;
    float tw = x[index + 2 * stride], th = x[index + 3 * stride];
    if (new_coords) {
        b.w = tw * tw * 4.0f * anchors[2 * anchor] / (float)netw;
        b.h = th * th * 4.0f * anchors[2 * anchor + 1] / (float)neth;
    } else {
        b.w = exp(tw) * anchors[2 * anchor] / (float)netw;
        b.h = exp(th) * anchors[2 * anchor + 1] / (float)neth;
    }
    return b;
}

KFN int yolo_mask(KGLOBAL const float* anchors, KARGS_PARAM(YoloLossArgs) a, int slot) { return (int)anchors[2 * a.num + slot]; }

KFN YoloBox yolo_pred(KGLOBAL const float* out, KGLOBAL const float* anchors, KARGS_PARAM(YoloLossArgs) a, int n, int loc) {
    return yolo_get_box(out, anchors, yolo_mask(anchors, a, n), yolo_index(a, n, loc, 0), loc % a.lw, loc / a.lw,
                        a.lw, a.lh, a.netw, a.neth, a.plane, a.new_coords);
}

// The class of truth row t, or -1 when the row is not used (a class outside 0..classes-1). Callers
// also stop after max_boxes used rows, as Darknet's truth list holds at most max_boxes.
KFN int yolo_truth_class(KGLOBAL const float* truths, KARGS_PARAM(YoloLossArgs) a, int t) {
    int cls = (int)truths[5 * t + 4];
    return cls >= 0 && cls < a.classes ? cls : -1;
}

KFN YoloBox yolo_truth_box(KGLOBAL const float* truths, int t) {
    return yolo_box(truths[5 * t], truths[5 * t + 1], truths[5 * t + 2], truths[5 * t + 3]);
}

// Darknet's delta_yolo_box for mask slot n at cell (i, j); returns the IoU of prediction and truth.
KFN float yolo_delta_box(KGLOBAL const float* out, KGLOBAL float* delta, KGLOBAL const float* anchors, KARGS_PARAM(YoloLossArgs) a,
                         YoloBox truth, int n, int i, int j, float scale) {
    int bi = yolo_index(a, n, j * a.lw + i, 0), an = yolo_mask(anchors, a, n), plane = a.plane;
    float tw_out = out[bi + 2 * plane], th_out = out[bi + 3 * plane];
    YoloBox p = yolo_pred(out, anchors, a, n, j * a.lw + i);
    float iou = yolo_box_iou(p, truth);
    if (p.w == 0.0f) p.w = 1.0f;
    if (p.h == 0.0f) p.h = 1.0f;
    if (a.iou_loss == YOLO_IOU_MSE) {
        float tx = truth.x * (float)a.lw - (float)i, ty = truth.y * (float)a.lh - (float)j;
        float tw = log(truth.w * (float)a.netw / anchors[2 * an]), th = log(truth.h * (float)a.neth / anchors[2 * an + 1]);
        if (a.new_coords) {
            tw = sqrt(truth.w * (float)a.netw / (4.0f * anchors[2 * an]));
            th = sqrt(truth.h * (float)a.neth / (4.0f * anchors[2 * an + 1]));
        }
        delta[bi] += scale * (tx - out[bi]) * a.iou_normalizer;
        delta[bi + plane] += scale * (ty - out[bi + plane]) * a.iou_normalizer;
        delta[bi + 2 * plane] += scale * (tw - tw_out) * a.iou_normalizer;
        delta[bi + 3 * plane] += scale * (th - th_out) * a.iou_normalizer;
        return iou;
    }
    YoloBox d = yolo_iou_ascent(p, truth, a.iou_loss);
    if (!a.new_coords) {  // chain rule of exp() for w, h only, as Darknet
        d.w *= exp(tw_out);
        d.h *= exp(th_out);
    }
    for (int k = 0; k < 4; ++k) {
        float v = k == 0 ? d.x : (k == 1 ? d.y : (k == 2 ? d.w : d.h));
        float dv = yolo_finite_or_zero(v * a.iou_normalizer);
        if (a.max_delta < 3.4e38f) dv = dv > a.max_delta ? a.max_delta : (dv < -a.max_delta ? -a.max_delta : dv);
        delta[bi + k * plane] += dv;
    }
    return iou;
}

KFN float yolo_class_target(KARGS_PARAM(YoloLossArgs) a, float y) {
    return a.label_smooth_eps != 0.0f ? y * (1.0f - a.label_smooth_eps) + 0.5f * a.label_smooth_eps : y;
}

// Darknet's focal_loss=1 factor of the class deltas: alpha * grad with alpha = 0.5 and
// grad = -(1 - pt) (2 pt log(pt) + pt - 1), pt the probability of the true class (gamma = 2 folded
// into the formula, as Darknet's delta_yolo_class has it).
KFN float yolo_focal_factor(float pt) {
    pt += 1e-15f;  // Darknet's guard against log(0)
    return 0.5f * (-(1.0f - pt) * (2.0f * pt * log(pt) + pt - 1.0f));
}

// Darknet's delta_yolo_class (no per-class multipliers); returns the probability of the true class
// (the avg_class statistic). With focal_loss every class delta is scaled by yolo_focal_factor and,
// as in Darknet, label smoothing does not apply.
KFN float yolo_delta_class(KGLOBAL const float* out, KGLOBAL float* delta, KARGS_PARAM(YoloLossArgs) a, int n, int loc, int cls) {
    int ci = yolo_index(a, n, loc, 5);
    if (delta[ci + cls * a.plane] != 0.0f) {  // this cell already has a truth: only set the new class
        float r = yolo_class_target(a, 1.0f) - out[ci + cls * a.plane];
        if (isfinite(r)) delta[ci + cls * a.plane] = r;
        return out[ci + cls * a.plane];
    }
    if (a.focal_loss) {
        float f = yolo_focal_factor(out[ci + cls * a.plane]);
        for (int c = 0; c < a.classes; ++c)
            delta[ci + c * a.plane] = ((c == cls ? 1.0f : 0.0f) - out[ci + c * a.plane]) * f;
        return out[ci + cls * a.plane];
    }
    for (int c = 0; c < a.classes; ++c) {
        float r = yolo_class_target(a, c == cls ? 1.0f : 0.0f) - out[ci + c * a.plane];
        if (isfinite(r)) delta[ci + c * a.plane] = r;
    }
    return out[ci + cls * a.plane];
}

// Pass (1) for prediction (mask slot n, cell loc): writes every entry of that prediction's delta
// (zeros first: the op overwrites delta).
KFN void yolo_objectness_pass(KGLOBAL const float* out, KGLOBAL const float* truths, KGLOBAL const float* anchors,
                              KARGS_PARAM(YoloLossArgs) a, KGLOBAL float* delta, int n, int loc) {
    for (int e = 0; e < 5 + a.classes; ++e) delta[yolo_index(a, n, loc, e)] = 0.0f;
    int oi = yolo_index(a, n, loc, 4), ci = yolo_index(a, n, loc, 5);
    YoloBox p = yolo_pred(out, anchors, a, n, loc);
    int class_match = 0;
    for (int c = 0; c < a.classes; ++c)
        if (out[ci + c * a.plane] > 0.25f) class_match = 1;
    float best_match_iou = 0.0f, best_iou = 0.0f;
    int best_t = -1, used = 0;
    for (int t = 0; t < a.truth_rows && used < a.max_boxes; ++t) {
        if (yolo_truth_class(truths, a, t) < 0) continue;
        ++used;
        if (best_t < 0) best_t = t;  // Darknet's best_t starts at the first truth
        float iou = yolo_box_iou(p, yolo_truth_box(truths, t));
        if (iou > best_match_iou && class_match) best_match_iou = iou;
        if (iou > best_iou) {
            best_iou = iou;
            best_t = t;
        }
    }
    float obj = yolo_finite_or_zero(out[oi]);
    delta[oi] = a.obj_normalizer * (0.0f - obj);
    if (best_match_iou > a.ignore_thresh) {
        if (a.objectness_smooth) {
            float d = a.obj_normalizer * (best_match_iou - obj);
            if (d > delta[oi]) delta[oi] = d;
        } else {
            delta[oi] = 0.0f;
        }
    }
    if (best_iou > a.truth_thresh && best_t >= 0) {
        float iou_mult = best_iou * best_iou;
        delta[oi] = a.obj_normalizer * ((a.objectness_smooth ? iou_mult : 1.0f) - obj);
        int cls = yolo_truth_class(truths, a, best_t);
        yolo_delta_class(out, delta, a, n, loc, cls);
        if (a.objectness_smooth) delta[ci + cls * a.plane] = iou_mult - out[ci + cls * a.plane];
        YoloBox tb = yolo_truth_box(truths, best_t);
        yolo_delta_box(out, delta, anchors, a, tb, n, loc % a.lw, loc / a.lw, 2.0f - tb.w * tb.h);
    }
}

// IoU of anchor `an`'s shape with a truth's shape (both centred at 0)
KFN float yolo_anchor_iou(KGLOBAL const float* anchors, KARGS_PARAM(YoloLossArgs) a, int an, YoloBox shape) {
    return yolo_box_iou(yolo_box(0.0f, 0.0f, anchors[2 * an] / (float)a.netw, anchors[2 * an + 1] / (float)a.neth), shape);
}

// The slot of anchor `an` in this head's mask, or -1
KFN int yolo_mask_slot(KGLOBAL const float* anchors, KARGS_PARAM(YoloLossArgs) a, int an) {
    for (int k = 0; k < a.anchors_used; ++k)
        if (yolo_mask(anchors, a, k) == an) return k;
    return -1;
}

// One (truth, mask slot) assignment of pass (2); adds to the image's statistics.
KFN void yolo_assign(KGLOBAL const float* out, KGLOBAL const float* anchors, KARGS_PARAM(YoloLossArgs) a, KGLOBAL float* delta,
                     KGLOBAL float* stats, YoloBox tb, int cls, int slot, int i, int j) {
    int loc = j * a.lw + i, oi = yolo_index(a, slot, loc, 4);
    float iou = yolo_delta_box(out, delta, anchors, a, tb, slot, i, j, 2.0f - tb.w * tb.h);
    stats[YOLO_STAT_IOU] += iou;
    stats[YOLO_STAT_OBJ] += out[oi];
    float d = a.obj_normalizer * (1.0f - out[oi]);
    if (!a.objectness_smooth || delta[oi] == 0.0f) delta[oi] = d;
    stats[YOLO_STAT_CLASS] += yolo_delta_class(out, delta, a, slot, loc, cls);
    stats[YOLO_STAT_COUNT] += 1.0f;
    if (iou > 0.5f) stats[YOLO_STAT_RECALL50] += 1.0f;
    if (iou > 0.75f) stats[YOLO_STAT_RECALL75] += 1.0f;
}

// Pass (2) for one image, its truths in order: the best anchor over all anchors (by shape), if this
// head owns it, plus any other anchor of this head above iou_thresh. Writes stats[2 ..].
KFN void yolo_truth_pass(KGLOBAL const float* out, KGLOBAL const float* truths, KGLOBAL const float* anchors,
                         KARGS_PARAM(YoloLossArgs) a, KGLOBAL float* delta, KGLOBAL float* stats) {
    for (int k = YOLO_STAT_IOU; k < YOLO_LOSS_STATS; ++k) stats[k] = 0.0f;
    int used = 0;
    for (int t = 0; t < a.truth_rows && used < a.max_boxes; ++t) {
        int cls = yolo_truth_class(truths, a, t);
        if (cls < 0) continue;
        ++used;
        YoloBox tb = yolo_truth_box(truths, t);
        int i = (int)(tb.x * (float)a.lw), j = (int)(tb.y * (float)a.lh);
        if (i < 0 || i >= a.lw || j < 0 || j >= a.lh) continue;
        YoloBox shape = yolo_box(0.0f, 0.0f, tb.w, tb.h);
        float best = 0.0f;
        int best_n = 0;
        for (int an = 0; an < a.num; ++an) {
            float iou = yolo_anchor_iou(anchors, a, an, shape);
            if (iou > best) {
                best = iou;
                best_n = an;
            }
        }
        int slot = yolo_mask_slot(anchors, a, best_n);
        if (slot >= 0) yolo_assign(out, anchors, a, delta, stats, tb, cls, slot, i, j);
        if (a.iou_thresh < 1.0f)
            for (int an = 0; an < a.num; ++an) {
                int other = yolo_mask_slot(anchors, a, an);
                if (other < 0 || an == best_n) continue;
                // Darknet compares with its iou_thresh_kind (IoU by default)
                if (yolo_anchor_iou(anchors, a, an, shape) > a.iou_thresh)
                    yolo_assign(out, anchors, a, delta, stats, tb, cls, other, i, j);
            }
    }
}

// Pass (3) for prediction (n, loc): with several anchors per truth, the box delta is averaged over
// the prediction's positive classes; then delta becomes the gradient (Darknet's delta is
// -dL/d(input)). Returns the sum of the squared deltas.
KFN float yolo_finish_prediction(KGLOBAL float* delta, KARGS_PARAM(YoloLossArgs) a, int n, int loc) {
    if (a.iou_thresh < 1.0f && delta[yolo_index(a, n, loc, 4)] != 0.0f) {
        int positive = 0;
        for (int c = 0; c < a.classes; ++c) positive += delta[yolo_index(a, n, loc, 5 + c)] > 0.0f ? 1 : 0;
        if (positive > 0)
            for (int k = 0; k < 4; ++k) delta[yolo_index(a, n, loc, k)] /= (float)positive;
    }
    float squares = 0.0f;
    for (int e = 0; e < 5 + a.classes; ++e) {
        int i = yolo_index(a, n, loc, e);
        float d = delta[i];
        squares += d * d;
        delta[i] = -d;
    }
    return squares;
}

KNAMESPACE_END
