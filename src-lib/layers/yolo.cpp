#include "yolo.h"

namespace dn {

void YoloLayer::forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) {
    be.yolo_activate(x, geom(), y);
}

std::string YoloLayer::describe() const {
    return std::to_string(spec.classes) + " classes, " + std::to_string(spec.mask.size()) + " anchors";
}

std::unique_ptr<Layer> make_yolo(const Section& s, const BuildContext& ctx) {
    auto l = std::make_unique<YoloLayer>();
    YoloSpec& y = l->spec;
    y.classes = s.get_int("classes", 20, 1, 1 << 20);
    y.num = s.get_int("num", 1, 1, 1 << 16);
    y.mask = s.get_ints("mask");
    if (y.mask.empty())
        for (int i = 0; i < y.num; ++i) y.mask.push_back(i);
    for (int m : y.mask)
        if (m < 0 || m >= y.num)
            s.fail("mask", "mask index " + std::to_string(m) + " is out of range: num=" + std::to_string(y.num) +
                               " anchors (indices 0.." + std::to_string(y.num - 1) + ")");
    y.anchors = s.get_floats("anchors");
    if (y.anchors.empty()) y.anchors.assign(2 * y.num, 0.5f);
    if ((int)y.anchors.size() < 2 * y.num)
        s.fail("anchors", "anchors has " + std::to_string(y.anchors.size()) + " values but num=" +
                              std::to_string(y.num) + " needs " + std::to_string(2 * y.num) + " (w,h pairs)");
    for (float a : y.anchors)
        if (!(a > 0)) s.fail("anchors", "anchor sizes must be > 0");
    y.scale_x_y = s.get_float("scale_x_y", 1.0f);
    y.new_coords = s.get_int("new_coords", 0, 0, 1) != 0;
    std::string nms = s.get_string("nms_kind", "default");
    if (nms == "greedynms") y.nms_kind = NmsKind::greedy;
    else if (nms == "diounms") y.nms_kind = NmsKind::diou;
    else if (nms == "cornersnms") y.nms_kind = NmsKind::corners;
    else if (nms != "default") s.fail("nms_kind", "unknown nms_kind '" + nms + "' (greedynms, diounms, cornersnms)");
    y.beta_nms = s.get_float("beta_nms", 0.6f);
    y.jitter = s.get_float("jitter", 0.2f);
    y.ignore_thresh = s.get_float("ignore_thresh", 0.5f);
    y.truth_thresh = s.get_float("truth_thresh", 1.0f);
    y.iou_thresh = s.get_float("iou_thresh", 1.0f);
    y.iou_normalizer = s.get_float("iou_normalizer", 0.75f);
    y.obj_normalizer = s.get_float("obj_normalizer", 1.0f);
    y.cls_normalizer = s.get_float("cls_normalizer", 1.0f);
    y.delta_normalizer = s.get_float("delta_normalizer", 1.0f);
    y.label_smooth_eps = s.get_float("label_smooth_eps", 0.0f);
    y.max_delta = s.get_float("max_delta", 3.4e38f);
    y.resize = s.get_float("resize", 1.0f);
    y.random = s.get_int("random", 0);
    y.max_boxes = s.get_int("max", 200, 1, 1 << 20);
    y.objectness_smooth = s.get_int("objectness_smooth", 0, 0, 1);
    y.iou_loss = s.get_string("iou_loss", "mse");
    if (y.iou_loss != "mse" && y.iou_loss != "giou" && y.iou_loss != "diou" && y.iou_loss != "ciou" &&
        y.iou_loss != "iou")
        s.fail("iou_loss", "unknown iou_loss '" + y.iou_loss + "' (mse, giou, diou, ciou)");
    y.focal_loss = s.get_int("focal_loss", 0) != 0;  // Darknet: any non-zero value
    s.get_float("uc_normalizer", 1.0f);

    const Shape& in = ctx.input;
    long long expected = (y.classes + 5LL) * (long long)y.mask.size();  // a long mask= must not overflow
    if (in.c != expected) {
        std::string where = ctx.index > 0 ? "the layer before it (index " + std::to_string(ctx.index - 1) + ", line " +
                                                std::to_string(ctx.built[ctx.index - 1]->line) + ")"
                                          : "the input";
        s.fail("classes", where + " has " + std::to_string(in.c) + " channels but this yolo layer needs (classes + 5) x " +
                              "len(mask) = (" + std::to_string(y.classes) + " + 5) x " + std::to_string(y.mask.size()) +
                              " = " + std::to_string(expected) + " (set filters=" + std::to_string(expected) +
                              " in the convolutional layer before it)");
    }
    // Detections of all heads are ranked together per class (NMS), so every head needs the same classes.
    for (const auto& prev : ctx.built)
        if (auto* p = dynamic_cast<const YoloLayer*>(prev.get()))
            if (p->spec.classes != y.classes)
                s.fail("classes", "classes=" + std::to_string(y.classes) + " differs from classes=" +
                                      std::to_string(p->spec.classes) + " of the [yolo] layer at line " +
                                      std::to_string(p->line) + " (all [yolo] layers must have the same number of classes)");
    l->in = l->out = in;
    return l;
}

}  // namespace dn
