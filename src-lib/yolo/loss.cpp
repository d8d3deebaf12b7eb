// Host side of the YOLO loss: packs truths and the layer's options for the yolo_loss op, reduces
// the op's per-image sums into YoloLossStats, and runs the op's passes on host tensors for the CPU
// backends. The loss logic is in kernels/yolo_loss.h, shared with the device kernels.
#include "loss.h"

#include <algorithm>

#include "../errors.h"
#include "../gpu/device.h"
#include "../kernels/yolo_loss.h"

namespace dn {

const Tensor& yolo_anchors_on(Backend& be, const YoloLayer& layer) {
    Tensor& cached = layer.loss_anchors;
    if (!cached.empty() && cached.device() == be.device().get()) return cached;
    const YoloSpec& s = layer.spec;
    std::vector<float> v(s.anchors.begin(), s.anchors.begin() + 2 * s.num);
    for (int m : s.mask) v.push_back((float)m);
    Tensor host(Shape{1, 1, 1, (int)v.size()});
    std::copy(v.begin(), v.end(), host.data());
    cached = be.adopt(host);
    return cached;
}

namespace {

int iou_loss_kind(const std::string& s) {
    if (s == "giou") return YOLO_IOU_GIOU;
    if (s == "diou") return YOLO_IOU_DIOU;
    if (s == "ciou") return YOLO_IOU_CIOU;
    if (s == "iou") return YOLO_IOU_IOU;
    return YOLO_IOU_MSE;
}

YoloLossArgs loss_args(const YoloSpec& s, const Shape& sh, int truth_rows, int netw, int neth) {
    YoloLossArgs a;
    a.batch = sh.n;
    a.lw = sh.w;
    a.lh = sh.h;
    a.plane = sh.h * sh.w;
    a.anchors_used = (int)s.mask.size();
    a.classes = s.classes;
    a.num = s.num;
    a.truth_rows = truth_rows;
    a.max_boxes = s.max_boxes;
    a.netw = netw;
    a.neth = neth;
    a.new_coords = s.new_coords ? 1 : 0;
    a.iou_loss = iou_loss_kind(s.iou_loss);
    a.objectness_smooth = s.objectness_smooth;
    a.focal_loss = s.focal_loss ? 1 : 0;
    a.ignore_thresh = s.ignore_thresh;
    a.truth_thresh = s.truth_thresh;
    a.iou_thresh = s.iou_thresh;
    a.iou_normalizer = s.iou_normalizer;
    a.obj_normalizer = s.obj_normalizer;
    a.label_smooth_eps = s.label_smooth_eps;
    a.max_delta = s.max_delta;
    return a;
}

}  // namespace

Tensor yolo_truths(const std::vector<std::vector<TruthBox>>& truths, int batch) {
    size_t rows = 1;  // never empty: a device buffer of 0 bytes is not portable
    for (const auto& t : truths) rows = std::max(rows, t.size());
    Tensor r(Shape{batch, (int)rows, 1, 5});
    float* p = r.data();
    for (int b = 0; b < batch; ++b)
        for (size_t k = 0; k < rows; ++k) {
            float* row = p + ((size_t)b * rows + k) * 5;
            if (b < (int)truths.size() && k < truths[b].size()) {
                const TruthBox& t = truths[b][k];
                row[0] = t.box.x, row[1] = t.box.y, row[2] = t.box.w, row[3] = t.box.h, row[4] = (float)t.cls;
            } else {
                row[4] = -1.0f;
            }
        }
    return r;
}

QueuedYoloLoss queue_yolo_loss(Backend& be, const YoloLayer& layer, const Tensor& output, Tensor& grad,
                               const Tensor& truths, int netw, int neth) {
    const Shape& sh = output.shape();
    if (truths.shape().n != sh.n || truths.shape().w != 5)
        throw DarknetError("yolo_loss: truths are " + truths.shape().str() + ", expected " + std::to_string(sh.n) +
                           "xRx1x5 (yolo_truths)");
    YoloLossArgs a = loss_args(layer.spec, sh, truths.shape().c, netw, neth);
    Tensor out = be.adopt(output), tr = be.adopt(truths);  // no copies when they are in be's memory already
    bool in_place = grad.buffer() && grad.device() == be.device().get();
    Tensor delta = in_place ? grad : be.alloc(grad.shape());
    QueuedYoloLoss q;
    q.stats = be.alloc(Shape{sh.n, 1, 1, YOLO_LOSS_STATS});  // a buffer per call: later ops never write it
    be.yolo_loss(out, tr, yolo_anchors_on(be, layer), a, delta, q.stats);
    if (!in_place) copy_tensor(delta, grad);
    if (Device* dev = q.stats.device()) q.mark = dev->mark_queue();
    q.predictions = (double)a.plane * a.anchors_used * sh.n;
    return q;
}

YoloLossStats read_yolo_loss(const QueuedYoloLoss& q) {
    // the only download: YOLO_LOSS_STATS floats per image
    std::vector<float> host(q.stats.size());
    if (q.stats.on_host()) copy_to_host(q.stats, host.data());
    else q.stats.device()->download_marked(q.mark.get(), q.stats.memory(), 0, host.data(), host.size() * sizeof(float));
    double sum[YOLO_LOSS_STATS] = {};
    for (size_t i = 0; i < host.size(); ++i) sum[i % YOLO_LOSS_STATS] += host[i];
    YoloLossStats st;
    st.count = (int)sum[YOLO_STAT_COUNT];
    double count = st.count ? st.count : 1;
    st.loss = sum[YOLO_STAT_SQUARES];
    st.avg_iou = sum[YOLO_STAT_IOU] / count;
    st.avg_class = sum[YOLO_STAT_CLASS] / count;
    st.avg_obj = sum[YOLO_STAT_OBJ] / count;
    st.avg_noobj = sum[YOLO_STAT_ANYOBJ] / q.predictions;
    st.recall50 = sum[YOLO_STAT_RECALL50] / count;
    st.recall75 = sum[YOLO_STAT_RECALL75] / count;
    return st;
}

YoloLossStats yolo_loss(Backend& be, const YoloLayer& layer, const Tensor& output, Tensor& grad, const Tensor& truths,
                        int netw, int neth) {
    return read_yolo_loss(queue_yolo_loss(be, layer, output, grad, truths, netw, neth));
}

YoloLossStats yolo_loss(Backend& be, const YoloLayer& layer, const Tensor& output, Tensor& grad,
                        const std::vector<std::vector<TruthBox>>& truths, int netw, int neth) {
    return yolo_loss(be, layer, output, grad, yolo_truths(truths, output.shape().n), netw, neth);
}

void yolo_loss_images(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                      Tensor& delta, Tensor& stats, int b0, int b1) {
    int per_image = a.anchors_used * a.plane;
    size_t sample = (size_t)per_image * (5 + a.classes);
    for (int b = b0; b < b1; ++b) {
        const float* out = output.data() + b * sample;
        const float* tr = truths.data() + (size_t)b * a.truth_rows * 5;
        float* d = delta.data() + b * sample;
        float* st = stats.data() + (size_t)b * YOLO_LOSS_STATS;
        // the passes in Darknet's order (kernels/yolo_loss.h); sums in double on the host
        for (int p = 0; p < per_image; ++p) yolo_objectness_pass(out, tr, anchors.data(), a, d, p / a.plane, p % a.plane);
        yolo_truth_pass(out, tr, anchors.data(), a, d, st);
        double squares = 0, anyobj = 0;
        for (int p = 0; p < per_image; ++p) {
            squares += yolo_finish_prediction(d, a, p / a.plane, p % a.plane);
            anyobj += yolo_finite_or_zero(out[yolo_index(a, p / a.plane, p % a.plane, 4)]);
        }
        st[YOLO_STAT_SQUARES] = (float)squares;
        st[YOLO_STAT_ANYOBJ] = (float)anyobj;
    }
}

}  // namespace dn
