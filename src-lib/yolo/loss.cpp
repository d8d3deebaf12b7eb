// Darknet's yolo loss. Darknet computes `delta` = the negative gradient w.r.t. the head's input
// (logistic + BCE-style deltas are taken w.r.t. the logits: target - sigmoid output). We compute the
// same deltas per image and store grad = -delta.
#include "loss.h"

#include <cmath>
#include <vector>

#include "box_iou_grad.h"
#include "detect.h"

namespace dn {

namespace {

IouLoss iou_loss_kind(const std::string& s) {
    if (s == "giou") return IouLoss::giou;
    if (s == "diou") return IouLoss::diou;
    if (s == "ciou") return IouLoss::ciou;
    if (s == "iou") return IouLoss::iou;
    return IouLoss::mse;
}

float finite_or_zero(float v) { return std::isfinite(v) ? v : 0.0f; }
float clip(float v, float m) { return v > m ? m : (v < -m ? -m : v); }

// One image of one head: output and delta point at the image's block.
struct HeadImage {
    const YoloLayer& l;
    const YoloSpec& s;
    const float* out;
    float* delta;
    int lw, lh, netw, neth, plane;

    int index(int n, int loc, int entry) const { return n * plane * (5 + s.classes) + entry * plane + loc; }

    Box pred(int n, int i, int j) const {
        return get_yolo_box(out, s.anchors, s.mask[n], index(n, j * lw + i, 0), i, j, lw, lh, netw, neth, plane,
                            s.new_coords);
    }

    // Darknet's delta_yolo_box for mask slot n at cell (i, j); returns the IoUs.
    BoxIous delta_box(const Box& truth, int n, int i, int j, float scale) {
        int bi = index(n, j * lw + i, 0), a = s.mask[n];
        float tw_out = out[bi + 2 * plane], th_out = out[bi + 3 * plane];
        Box p = pred(n, i, j);
        BoxIous ious = box_ious(p, truth);
        if (p.w == 0) p.w = 1.0f;
        if (p.h == 0) p.h = 1.0f;
        IouLoss kind = iou_loss_kind(s.iou_loss);
        if (kind == IouLoss::mse) {
            float tx = truth.x * lw - i, ty = truth.y * lh - j;
            float tw = std::log(truth.w * netw / s.anchors[2 * a]), th = std::log(truth.h * neth / s.anchors[2 * a + 1]);
            if (s.new_coords) {
                tw = std::sqrt(truth.w * netw / (4 * s.anchors[2 * a]));
                th = std::sqrt(truth.h * neth / (4 * s.anchors[2 * a + 1]));
            }
            delta[bi] += scale * (tx - out[bi]) * s.iou_normalizer;
            delta[bi + plane] += scale * (ty - out[bi + plane]) * s.iou_normalizer;
            delta[bi + 2 * plane] += scale * (tw - tw_out) * s.iou_normalizer;
            delta[bi + 3 * plane] += scale * (th - th_out) * s.iou_normalizer;
            return ious;
        }
        Box d = box_iou_ascent(p, truth, kind);
        if (!s.new_coords) {  // chain rule of exp() for w, h only, as Darknet
            d.w *= std::exp(tw_out);
            d.h *= std::exp(th_out);
        }
        float v[4] = {d.x, d.y, d.w, d.h};
        for (int k = 0; k < 4; ++k) {
            float dv = finite_or_zero(v[k] * s.iou_normalizer);
            if (s.max_delta < 3.4e38f) dv = clip(dv, s.max_delta);
            delta[bi + k * plane] += dv;
        }
        return ious;
    }

    // Darknet's delta_yolo_class (no focal loss, no per-class multipliers).
    void delta_class(int n, int loc, int cls, double* avg_cat) {
        int ci = index(n, loc, 5);
        auto target = [&](float y) { return s.label_smooth_eps ? y * (1 - s.label_smooth_eps) + 0.5f * s.label_smooth_eps : y; };
        if (delta[ci + cls * plane] != 0) {  // this cell already has a truth: only set the new class
            float r = target(1.0f) - out[ci + cls * plane];
            if (std::isfinite(r)) delta[ci + cls * plane] = r;
            if (avg_cat) *avg_cat += out[ci + cls * plane];
            return;
        }
        for (int c = 0; c < s.classes; ++c) {
            float r = target(c == cls ? 1.0f : 0.0f) - out[ci + c * plane];
            if (std::isfinite(r)) delta[ci + c * plane] = r;
            if (c == cls && avg_cat) *avg_cat += out[ci + c * plane];
        }
    }

    bool any_class_above(int n, int loc, float thresh) const {
        int ci = index(n, loc, 5);
        for (int c = 0; c < s.classes; ++c)
            if (out[ci + c * plane] > thresh) return true;
        return false;
    }
};

int mask_slot(const std::vector<int>& mask, int anchor) {
    for (size_t k = 0; k < mask.size(); ++k)
        if (mask[k] == anchor) return (int)k;
    return -1;
}

}  // namespace

YoloLossStats yolo_loss(const YoloLayer& layer, const Tensor& output, Tensor& grad,
                        const std::vector<std::vector<TruthBox>>& truths, int netw, int neth) {
    const YoloSpec& s = layer.spec;
    const Shape& sh = output.shape();
    int lw = sh.w, lh = sh.h, plane = lw * lh, na = (int)s.mask.size();
    size_t per_image = sh.sample();
    std::vector<float> delta(output.size(), 0.0f);
    // The loss runs on the host: a device head comes down once here, its delta goes up once below.
    Tensor host_output = to_host(output);
    YoloLossStats st;
    double tot_iou = 0, avg_cat = 0, avg_obj = 0, avg_anyobj = 0, recall = 0, recall75 = 0;
    int class_count = 0;

    for (int b = 0; b < sh.n; ++b) {
        HeadImage h{layer, s, host_output.data() + b * per_image, delta.data() + b * per_image, lw, lh, netw, neth, plane};
        std::vector<TruthBox> boxes;
        for (const TruthBox& t : b < (int)truths.size() ? truths[b] : std::vector<TruthBox>{})
            if (t.cls >= 0 && t.cls < s.classes && (int)boxes.size() < s.max_boxes) boxes.push_back(t);

        // 1. every prediction: no-object delta, unless it already overlaps a truth well (ignore_thresh)
        for (int j = 0; j < lh; ++j)
            for (int i = 0; i < lw; ++i)
                for (int n = 0; n < na; ++n) {
                    int loc = j * lw + i, oi = h.index(n, loc, 4);
                    Box p = h.pred(n, i, j);
                    float best_match_iou = 0, best_iou = 0;
                    int best_t = 0;
                    bool class_match = h.any_class_above(n, loc, 0.25f);
                    for (size_t t = 0; t < boxes.size(); ++t) {
                        float iou = box_iou(p, boxes[t].box);
                        if (iou > best_match_iou && class_match) best_match_iou = iou;
                        if (iou > best_iou) best_iou = iou, best_t = (int)t;
                    }
                    float obj = finite_or_zero(h.out[oi]);
                    avg_anyobj += obj;
                    h.delta[oi] = s.obj_normalizer * (0 - obj);
                    if (best_match_iou > s.ignore_thresh) {
                        if (s.objectness_smooth) {
                            float d = s.obj_normalizer * (best_match_iou - obj);
                            if (d > h.delta[oi]) h.delta[oi] = d;
                        } else {
                            h.delta[oi] = 0;
                        }
                    }
                    if (best_iou > s.truth_thresh) {
                        float iou_mult = best_iou * best_iou;
                        h.delta[oi] = s.obj_normalizer * ((s.objectness_smooth ? iou_mult : 1.0f) - obj);
                        int cls = boxes[best_t].cls;
                        h.delta_class(n, loc, cls, nullptr);
                        if (s.objectness_smooth) h.delta[h.index(n, loc, 5 + cls)] = iou_mult - h.out[h.index(n, loc, 5 + cls)];
                        const Box& tb = boxes[best_t].box;
                        h.delta_box(tb, n, i, j, 2 - tb.w * tb.h);
                    }
                }

        // 2. every truth: the best anchor over all anchors (by shape), if this head owns it,
        //    plus any other anchor of this head above iou_thresh
        for (const TruthBox& t : boxes) {
            const Box& tb = t.box;
            int i = (int)(tb.x * lw), j = (int)(tb.y * lh);
            if (i < 0 || i >= lw || j < 0 || j >= lh) continue;
            Box shape{0, 0, tb.w, tb.h};
            float best = 0;
            int best_n = 0;
            for (int a = 0; a < s.num; ++a) {
                float iou = box_iou(Box{0, 0, s.anchors[2 * a] / netw, s.anchors[2 * a + 1] / neth}, shape);
                if (iou > best) best = iou, best_n = a;
            }
            auto assign = [&](int slot) {
                int loc = j * lw + i, oi = h.index(slot, loc, 4);
                BoxIous ious = h.delta_box(tb, slot, i, j, 2 - tb.w * tb.h);
                tot_iou += ious.iou;
                avg_obj += h.out[oi];
                float d = s.obj_normalizer * (1 - h.out[oi]);
                if (!s.objectness_smooth || h.delta[oi] == 0) h.delta[oi] = d;
                h.delta_class(slot, loc, t.cls, &avg_cat);
                ++st.count;
                ++class_count;
                if (ious.iou > .5f) recall += 1;
                if (ious.iou > .75f) recall75 += 1;
            };
            int slot = mask_slot(s.mask, best_n);
            if (slot >= 0) assign(slot);
            if (s.iou_thresh < 1.0f)
                for (int a = 0; a < s.num; ++a) {
                    int other = mask_slot(s.mask, a);
                    if (other < 0 || a == best_n) continue;
                    // Darknet compares with its iou_thresh_kind (IoU by default)
                    float iou = box_iou(Box{0, 0, s.anchors[2 * a] / netw, s.anchors[2 * a + 1] / neth}, shape);
                    if (iou > s.iou_thresh) assign(other);
                }
        }

        // 3. with several anchors per truth, average each cell's box delta over its positive classes
        if (s.iou_thresh < 1.0f)
            for (int loc = 0; loc < plane; ++loc)
                for (int n = 0; n < na; ++n) {
                    if (h.delta[h.index(n, loc, 4)] == 0) continue;
                    int positive = 0;
                    for (int c = 0; c < s.classes; ++c) positive += h.delta[h.index(n, loc, 5 + c)] > 0;
                    if (positive > 0)
                        for (int k = 0; k < 4; ++k) h.delta[h.index(n, loc, k)] /= positive;
                }
    }

    double loss = 0;
    for (float& d : delta) {
        loss += (double)d * d;
        d = -d;  // Darknet's delta is -dL/d(input)
    }
    copy_from_host(delta.data(), grad);
    int count = st.count ? st.count : 1;
    st.loss = loss;
    st.avg_iou = tot_iou / count;
    st.avg_class = avg_cat / (class_count ? class_count : 1);
    st.avg_obj = avg_obj / count;
    st.avg_noobj = avg_anyobj / ((double)plane * na * sh.n);
    st.recall50 = recall / count;
    st.recall75 = recall75 / count;
    return st;
}

}  // namespace dn
