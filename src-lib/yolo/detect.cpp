#include "detect.h"

#include <algorithm>
#include <cmath>

#include "../kernels/yolo_loss.h"

namespace dn {

namespace {

void correct_yolo_boxes(std::vector<Detection>& dets, size_t from, int w, int h, int netw, int neth, bool letter) {
    int new_w = netw, new_h = neth;
    if (letter) {
        if ((float)netw / w < (float)neth / h) {
            new_w = netw;
            new_h = (int)((long long)h * netw / w);  // 64-bit: a huge image must not overflow
        } else {
            new_h = neth;
            new_w = (int)((long long)w * neth / h);
        }
    }
    float deltaw = (float)(netw - new_w), deltah = (float)(neth - new_h);
    float ratiow = (float)new_w / netw, ratioh = (float)new_h / neth;
    for (size_t i = from; i < dets.size(); ++i) {
        Box& b = dets[i].box;
        b.x = (float)((b.x - deltaw / 2. / netw) / ratiow);
        b.y = (float)((b.y - deltah / 2. / neth) / ratioh);
        b.w *= 1 / ratiow;
        b.h *= 1 / ratioh;
    }
}

}  // namespace

Box get_yolo_box(const float* x, const std::vector<float>& anchors, int n, int index, int col, int row, int lw, int lh,
                 int netw, int neth, int stride, bool new_coords) {
    // the loss's decoder (kernel text), so that training and detection read boxes the same way
    YoloBox b = yolo_get_box(x, anchors.data(), n, index, col, row, lw, lh, netw, neth, stride, new_coords ? 1 : 0);
    return Box{b.x, b.y, b.w, b.h};
}

LayerOutputs heads_on_host(const Network& net, const LayerOutputs& outputs) {
    LayerOutputs heads(outputs.size());
    for (int li : net.yolo_layers()) heads[li] = to_host(outputs[li]);  // no copy on the CPU backends
    return heads;
}

std::vector<Detection> get_detections(const Network& net, const LayerOutputs& outputs, int b, int image_w, int image_h,
                                      float thresh, bool letterbox) {
    // the letterbox correction divides by them (an integer division by zero would kill the process)
    if (image_w <= 0 || image_h <= 0)
        throw DarknetError("image size must be positive, got " + std::to_string(image_w) + "x" +
                           std::to_string(image_h) + " for image " + std::to_string(b));
    std::vector<Detection> dets;
    int netw = net.options.width, neth = net.options.height;
    for (int li : net.yolo_layers()) {
        const YoloLayer& l = net.yolo(li);
        const YoloSpec& s = l.spec;
        const Tensor& t = outputs[li];
        int lw = l.out.w, lh = l.out.h, plane = lw * lh, entries = 5 + s.classes;
        const float* x = t.data() + (size_t)b * l.out.sample();
        size_t first = dets.size();
        for (int i = 0; i < plane; ++i) {
            int row = i / lw, col = i % lw;
            for (int n = 0; n < (int)s.mask.size(); ++n) {
                int base = n * entries * plane + i;
                float obj = x[base + 4 * plane];
                if (!(obj > thresh)) continue;
                Detection d;
                d.box = get_yolo_box(x, s.anchors, s.mask[n], base, col, row, lw, lh, netw, neth, plane, s.new_coords);
                d.objectness = obj;
                d.prob.resize(s.classes);
                for (int j = 0; j < s.classes; ++j) {
                    float p = obj * x[base + (5 + j) * plane];
                    d.prob[j] = p > thresh ? p : 0;
                }
                dets.push_back(std::move(d));
            }
        }
        correct_yolo_boxes(dets, first, image_w, image_h, netw, neth, letterbox);
    }
    return dets;
}

void nms(std::vector<Detection>& dets, float thresh, NmsKind kind, float beta_nms) {
    // Darknet drops detections with zero objectness before sorting.
    dets.erase(std::remove_if(dets.begin(), dets.end(), [](const Detection& d) { return d.objectness == 0; }),
               dets.end());
    if (dets.empty()) return;
    int classes = (int)dets[0].prob.size();
    std::vector<size_t> order(dets.size());
    for (int k = 0; k < classes; ++k) {
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        // stable: ties keep decode order, so results do not depend on the sort implementation
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t a, size_t b) { return dets[a].prob[k] > dets[b].prob[k]; });
        for (size_t i = 0; i < order.size(); ++i) {
            const Detection& a = dets[order[i]];
            if (a.prob[k] == 0) continue;
            for (size_t j = i + 1; j < order.size(); ++j) {
                Detection& b = dets[order[j]];
                bool suppress;
                switch (kind) {
                    case NmsKind::default_nms:
                    case NmsKind::corners: suppress = box_iou(a.box, b.box) > thresh; break;
                    // Darknet's greedynms compares DIoU with a fixed exponent of 0.6
                    case NmsKind::greedy: suppress = box_diou_nms(a.box, b.box, 0.6f) > thresh; break;
                    case NmsKind::diou: suppress = box_diou_nms(a.box, b.box, beta_nms) > thresh; break;
                    default: suppress = false;
                }
                if (suppress) b.prob[k] = 0;
            }
        }
    }
}

}  // namespace dn
