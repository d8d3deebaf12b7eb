// Boxes of the YOLO loss and the IoU family's gradients (Darknet's box.c: box_iou, dx_box_iou for
// iou, giou, diou and ciou), single source: the loss helpers (yolo_loss.h) call these on the CPU
// and in the device kernels. Boxes are centre x, y and width, height, relative to the image.
#pragma once
#include "compat_cpu.h"
KNAMESPACE_BEGIN

typedef struct { float x; float y; float w; float h; } YoloBox;

// iou_loss kinds (YoloLossArgs.iou_loss)
#define YOLO_IOU_MSE 0
#define YOLO_IOU_IOU 1
#define YOLO_IOU_GIOU 2
#define YOLO_IOU_DIOU 3
#define YOLO_IOU_CIOU 4

#define YOLO_PI 3.14159265358979f

KFN YoloBox yolo_box(float x, float y, float w, float h) {
    YoloBox b;
    b.x = x;
    b.y = y;
    b.w = w;
    b.h = h;
    return b;
}

// std::max / std::min's exact semantics (not fmax / fmin, which differ on NaN), as box.h's box_iou
KFN float yolo_max(float a, float b) { return a < b ? b : a; }
KFN float yolo_min(float a, float b) { return b < a ? b : a; }

KFN float yolo_overlap_1d(float c1, float w1, float c2, float w2) {
    float left = yolo_max(c1 - w1 / 2.0f, c2 - w2 / 2.0f);
    float right = yolo_min(c1 + w1 / 2.0f, c2 + w2 / 2.0f);
    return right - left;
}

KFN float yolo_box_intersection(YoloBox a, YoloBox b) {
    float w = yolo_overlap_1d(a.x, a.w, b.x, b.w), h = yolo_overlap_1d(a.y, a.h, b.y, b.h);
    if (w <= 0.0f || h <= 0.0f) return 0.0f;
    return w * h;
}

KFN float yolo_box_iou(YoloBox a, YoloBox b) {
    float i = yolo_box_intersection(a, b);
    float u = a.w * a.h + b.w * b.h - i;
    if (i == 0.0f || u == 0.0f) return 0.0f;
    return i / u;
}

// Darknet's dx_box_iou: the direction that increases the (g/d/c)IoU of pred with truth, in
// (dx, dy, dw, dh). kind: YOLO_IOU_*; iou (and mse, unused) give the plain IoU's gradient.
KFN YoloBox yolo_iou_ascent(YoloBox pred, YoloBox truth, int kind) {
    // edges: top, bottom, left, right of pred (p*) and truth (g*)
    float p_t = pred.y - pred.h / 2.0f, p_b = pred.y + pred.h / 2.0f;
    float p_l = pred.x - pred.w / 2.0f, p_r = pred.x + pred.w / 2.0f;
    float g_t = truth.y - truth.h / 2.0f, g_b = truth.y + truth.h / 2.0f;
    float g_l = truth.x - truth.w / 2.0f, g_r = truth.x + truth.w / 2.0f;
    float pt = fmin(p_t, p_b), pb = fmax(p_t, p_b), pl = fmin(p_l, p_r), pr = fmax(p_l, p_r);
    float X = (pb - pt) * (pr - pl);
    float Xhat = (g_b - g_t) * (g_r - g_l);
    float Ih = fmin(pb, g_b) - fmax(pt, g_t);
    float Iw = fmin(pr, g_r) - fmax(pl, g_l);
    float I = Iw * Ih, U = X + Xhat - I;
    float S = (pred.x - truth.x) * (pred.x - truth.x) + (pred.y - truth.y) * (pred.y - truth.y);
    float gCw = fmax(pr, g_r) - fmin(pl, g_l), gCh = fmax(pb, g_b) - fmin(pt, g_t);
    float gC = gCw * gCh;

    float dX_t = -(pr - pl), dX_b = pr - pl, dX_l = -(pb - pt), dX_r = pb - pt;
    float dI_t = pt > g_t ? -Iw : 0.0f, dI_b = pb < g_b ? Iw : 0.0f;
    float dI_l = pl > g_l ? -Ih : 0.0f, dI_r = pr < g_r ? Ih : 0.0f;
    float dU_t = dX_t - dI_t, dU_b = dX_b - dI_b, dU_l = dX_l - dI_l, dU_r = dX_r - dI_r;
    float dC_t = pt < g_t ? -gCw : 0.0f, dC_b = pb > g_b ? gCw : 0.0f;
    float dC_l = pl < g_l ? -gCh : 0.0f, dC_r = pr > g_r ? gCh : 0.0f;

    float p_dt = 0.0f, p_db = 0.0f, p_dl = 0.0f, p_dr = 0.0f;
    if (U > 0.0f) {
        p_dt = (U * dI_t - I * dU_t) / (U * U);
        p_db = (U * dI_b - I * dU_b) / (U * U);
        p_dl = (U * dI_l - I * dU_l) / (U * U);
        p_dr = (U * dI_r - I * dU_r) / (U * U);
    }
    // Darknet's degenerate-box rule, kept statement by statement (the second line sees the first)
    if (!(p_t < p_b)) p_dt = p_db;
    if (!(p_t < p_b)) p_db = p_dt;
    if (!(p_l < p_r)) p_dl = p_dr;
    if (!(p_l < p_r)) p_dr = p_dl;

    if (kind == YOLO_IOU_GIOU && gC > 0.0f) {
        float gt = (gC * dU_t - U * dC_t) / (gC * gC), gb = (gC * dU_b - U * dC_b) / (gC * gC);
        float gl = (gC * dU_l - U * dC_l) / (gC * gC), gr = (gC * dU_r - U * dC_r) / (gC * gC);
        if (Iw <= 0.0f || Ih <= 0.0f) {
            p_dt = gt;
            p_db = gb;
            p_dl = gl;
            p_dr = gr;
        } else {
            p_dt += gt;
            p_db += gb;
            p_dl += gl;
            p_dr += gr;
        }
    }

    float Cw = fmax(pred.x + pred.w / 2.0f, truth.x + truth.w / 2.0f) - fmin(pred.x - pred.w / 2.0f, truth.x - truth.w / 2.0f);
    float Ch = fmax(pred.y + pred.h / 2.0f, truth.y + truth.h / 2.0f) - fmin(pred.y - pred.h / 2.0f, truth.y - truth.h / 2.0f);
    float C = Cw * Cw + Ch * Ch;
    float dCw_dx = (pr > g_r ? 1.0f : 0.0f) - (pl < g_l ? 1.0f : 0.0f);
    float dCw_dw = (pr > g_r ? 0.5f : 0.0f) - (pl < g_l ? -0.5f : 0.0f);
    float dCh_dy = (pb > g_b ? 1.0f : 0.0f) - (pt < g_t ? 1.0f : 0.0f);
    float dCh_dh = (pb > g_b ? 0.5f : 0.0f) - (pt < g_t ? -0.5f : 0.0f);

    YoloBox d = yolo_box(p_dl + p_dr, p_dt + p_db, p_dr - p_dl, p_db - p_dt);  // Darknet does not halve dw, dh
    if ((kind == YOLO_IOU_DIOU || kind == YOLO_IOU_CIOU) && C > 0.0f) {
        float ddx = (2.0f * (truth.x - pred.x) * C - (2.0f * Cw * dCw_dx) * S) / (C * C);
        float ddy = (2.0f * (truth.y - pred.y) * C - (2.0f * Ch * dCh_dy) * S) / (C * C);
        float ddw = (2.0f * Cw * dCw_dw) * S / (C * C);
        float ddh = (2.0f * Ch * dCh_dh) * S / (C * C);
        if (kind == YOLO_IOU_CIOU) {
            float dat = atan(truth.w / truth.h) - atan(pred.w / pred.h);
            float ar = 4.0f / (YOLO_PI * YOLO_PI) * dat * dat;
            float alpha = ar / (1.0f - I / U + ar + 0.000001f);
            ddw += alpha * 8.0f / (YOLO_PI * YOLO_PI) * dat * pred.h;
            ddh += alpha * -8.0f / (YOLO_PI * YOLO_PI) * dat * pred.w;
        }
        if (Iw <= 0.0f || Ih <= 0.0f) {
            d = yolo_box(ddx, ddy, ddw, ddh);
        } else {
            d.x += ddx;
            d.y += ddy;
            d.w += ddw;
            d.h += ddh;
        }
    }
    return d;
}

KNAMESPACE_END
