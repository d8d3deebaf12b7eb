#include "box_iou_grad.h"

#include <cmath>

namespace dn {

namespace {
const float kPi = 3.14159265358979f;

struct Edges {
    float t, b, l, r;
};
Edges edges(const Box& a) { return {a.y - a.h / 2, a.y + a.h / 2, a.x - a.w / 2, a.x + a.w / 2}; }
}  // namespace

BoxIous box_ious(const Box& a, const Box& b) {
    BoxIous r;
    r.iou = box_iou(a, b);
    float left = std::fmin(a.x - a.w / 2, b.x - b.w / 2), right = std::fmax(a.x + a.w / 2, b.x + b.w / 2);
    float top = std::fmin(a.y - a.h / 2, b.y - b.h / 2), bot = std::fmax(a.y + a.h / 2, b.y + b.h / 2);
    float cw = right - left, ch = bot - top;
    float c_area = cw * ch, c_diag = cw * cw + ch * ch;
    float inter = box_intersection(a, b), uni = a.w * a.h + b.w * b.h - inter;
    r.giou = c_area == 0 ? r.iou : r.iou - (c_area - uni) / c_area;
    float d = (a.x - b.x) * (a.x - b.x) + (a.y - b.y) * (a.y - b.y);
    r.diou = c_diag == 0 ? r.iou : r.iou - std::pow(d / c_diag, 0.6f);
    if (c_diag == 0) {
        r.ciou = r.iou;
    } else {
        float dat = std::atan(b.w / b.h) - std::atan(a.w / a.h);
        float ar = 4 / (kPi * kPi) * dat * dat;
        float alpha = ar / (1 - r.iou + ar + 0.000001f);
        r.ciou = r.iou - (d / c_diag + alpha * ar);
    }
    return r;
}

Box box_iou_ascent(const Box& pred, const Box& truth, IouLoss kind) {
    Edges p = edges(pred), g = edges(truth);
    float pt = std::fmin(p.t, p.b), pb = std::fmax(p.t, p.b), pl = std::fmin(p.l, p.r), pr = std::fmax(p.l, p.r);
    float X = (pb - pt) * (pr - pl);
    float Xhat = (g.b - g.t) * (g.r - g.l);
    float Ih = std::fmin(pb, g.b) - std::fmax(pt, g.t);
    float Iw = std::fmin(pr, g.r) - std::fmax(pl, g.l);
    float I = Iw * Ih, U = X + Xhat - I;
    float S = (pred.x - truth.x) * (pred.x - truth.x) + (pred.y - truth.y) * (pred.y - truth.y);
    float gCw = std::fmax(pr, g.r) - std::fmin(pl, g.l), gCh = std::fmax(pb, g.b) - std::fmin(pt, g.t);
    float gC = gCw * gCh;

    float dX_t = -(pr - pl), dX_b = pr - pl, dX_l = -(pb - pt), dX_r = pb - pt;
    float dI_t = pt > g.t ? -Iw : 0, dI_b = pb < g.b ? Iw : 0, dI_l = pl > g.l ? -Ih : 0, dI_r = pr < g.r ? Ih : 0;
    float dU_t = dX_t - dI_t, dU_b = dX_b - dI_b, dU_l = dX_l - dI_l, dU_r = dX_r - dI_r;
    float dC_t = pt < g.t ? -gCw : 0, dC_b = pb > g.b ? gCw : 0, dC_l = pl < g.l ? -gCh : 0, dC_r = pr > g.r ? gCh : 0;

    float p_dt = 0, p_db = 0, p_dl = 0, p_dr = 0;
    if (U > 0) {
        p_dt = (U * dI_t - I * dU_t) / (U * U);
        p_db = (U * dI_b - I * dU_b) / (U * U);
        p_dl = (U * dI_l - I * dU_l) / (U * U);
        p_dr = (U * dI_r - I * dU_r) / (U * U);
    }
    if (!(p.t < p.b)) p_dt = p_db;
    if (!(p.t < p.b)) p_db = p_dt;
    if (!(p.l < p.r)) p_dl = p_dr;
    if (!(p.l < p.r)) p_dr = p_dl;

    if (kind == IouLoss::giou && gC > 0) {
        float gt = (gC * dU_t - U * dC_t) / (gC * gC), gb = (gC * dU_b - U * dC_b) / (gC * gC);
        float gl = (gC * dU_l - U * dC_l) / (gC * gC), gr = (gC * dU_r - U * dC_r) / (gC * gC);
        if (Iw <= 0 || Ih <= 0) p_dt = gt, p_db = gb, p_dl = gl, p_dr = gr;
        else p_dt += gt, p_db += gb, p_dl += gl, p_dr += gr;
    }

    float Cw = std::fmax(pred.x + pred.w / 2, truth.x + truth.w / 2) - std::fmin(pred.x - pred.w / 2, truth.x - truth.w / 2);
    float Ch = std::fmax(pred.y + pred.h / 2, truth.y + truth.h / 2) - std::fmin(pred.y - pred.h / 2, truth.y - truth.h / 2);
    float C = Cw * Cw + Ch * Ch;
    float dCw_dx = (pr > g.r ? 1.f : 0.f) - (pl < g.l ? 1.f : 0.f);
    float dCw_dw = (pr > g.r ? 0.5f : 0.f) - (pl < g.l ? -0.5f : 0.f);
    float dCh_dy = (pb > g.b ? 1.f : 0.f) - (pt < g.t ? 1.f : 0.f);
    float dCh_dh = (pb > g.b ? 0.5f : 0.f) - (pt < g.t ? -0.5f : 0.f);

    Box d;
    d.x = p_dl + p_dr;
    d.y = p_dt + p_db;
    d.w = p_dr - p_dl;  // Darknet does not halve dw, dh
    d.h = p_db - p_dt;
    if ((kind == IouLoss::diou || kind == IouLoss::ciou) && C > 0) {
        float ddx = (2 * (truth.x - pred.x) * C - (2 * Cw * dCw_dx) * S) / (C * C);
        float ddy = (2 * (truth.y - pred.y) * C - (2 * Ch * dCh_dy) * S) / (C * C);
        float ddw = (2 * Cw * dCw_dw) * S / (C * C);
        float ddh = (2 * Ch * dCh_dh) * S / (C * C);
        if (kind == IouLoss::ciou) {
            float dat = std::atan(truth.w / truth.h) - std::atan(pred.w / pred.h);
            float ar = 4 / (kPi * kPi) * dat * dat;
            float alpha = ar / (1 - I / U + ar + 0.000001f);
            ddw += alpha * 8 / (kPi * kPi) * dat * pred.h;
            ddh += alpha * -8 / (kPi * kPi) * dat * pred.w;
        }
        if (Iw <= 0 || Ih <= 0) d = Box{ddx, ddy, ddw, ddh};
        else d.x += ddx, d.y += ddy, d.w += ddw, d.h += ddh;
    }
    return d;
}

}  // namespace dn
