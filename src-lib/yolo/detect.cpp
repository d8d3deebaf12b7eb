#include "detect.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <cstring>

#include "../kernels/yolo_decode.h"
#include "../kernels/yolo_loss.h"
#include "gnu_sort.h"
#include "loss.h"

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

void check_image_size(int b, int image_w, int image_h) {
    // the letterbox correction divides by them (an integer division by zero would kill the process)
    if (image_w <= 0 || image_h <= 0)
        throw DarknetError("image size must be positive, got " + std::to_string(image_w) + "x" +
                           std::to_string(image_h) + " for image " + std::to_string(b));
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
    check_image_size(b, image_w, image_h);
    std::vector<Detection> dets;
    int netw = net.options.width, neth = net.options.height;
    for (int li : net.yolo_layers()) {
        const YoloLayer& l = net.yolo(li);
        const YoloSpec& s = l.spec;
        const Tensor& t = outputs[li];
        int lw = l.out.w, lh = l.out.h, plane = lw * lh, entries = 5 + s.classes;
        const float* x = t.data() + (size_t)b * l.out.sample();
        size_t first = dets.size();
        // hank-ai's Darknet's order (get_network_boxes: yolo_num_detections_v3 lists anchor by anchor,
        // each over the locations), which its NMS sort starts from (AlexeyAB's: location by location)
        for (int n = 0; n < (int)s.mask.size(); ++n) {
            for (int i = 0; i < plane; ++i) {
                int row = i / lw, col = i % lw;
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

void yolo_candidates_images(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a, Tensor& candidates,
                            Tensor& counts, int b0, int b1) {
    int per_image = a.anchors_used * a.plane;
    size_t sample = (size_t)per_image * (5 + a.classes);
    for (int b = b0; b < b1; ++b) {
        const float* x = output.data() + b * sample;
        float* cand = candidates.data() + (size_t)b * per_image * a.record;
        int32_t count = 0;
        for (int loc = 0; loc < a.plane; ++loc)  // Darknet's order: the device's slots are in any order
            for (int n = 0; n < a.anchors_used; ++n)
                if (yolo_decode_is_candidate(x, a, n, loc))
                    yolo_decode_write(x, anchors.data(), a, n, loc, cand + (size_t)count++ * a.record);
        std::memcpy(counts.data() + b, &count, sizeof count);  // int32 bits, as the kernel's counter
    }
}

Candidates yolo_candidates(Network& net, const LayerOutputs& outputs, float thresh) {
    Backend& be = net.backend();
    Candidates result(outputs.size());
    int netw = net.options.width, neth = net.options.height;
    std::vector<int> heads = net.yolo_layers();
    std::vector<YoloDecodeArgs> args(heads.size());
    for (size_t h = 0; h < heads.size(); ++h) {
        const YoloLayer& l = net.yolo(heads[h]);
        const YoloSpec& s = l.spec;
        const Shape& sh = outputs[heads[h]].shape();
        YoloDecodeArgs& a = args[h];
        a.batch = sh.n;
        a.lw = sh.w;
        a.lh = sh.h;
        a.plane = sh.w * sh.h;
        a.anchors_used = (int)s.mask.size();
        a.classes = s.classes;
        a.num = s.num;
        a.netw = netw;
        a.neth = neth;
        a.new_coords = s.new_coords ? 1 : 0;
        a.record = YOLO_CAND_PROB + s.classes;
        a.thresh = thresh;
        Tensor out = be.adopt(outputs[heads[h]]);  // no copy: the forward pass left it in be's memory
        be.resize(l.candidates, Shape{a.batch, a.anchors_used * a.plane, 1, a.record});
        be.resize(l.candidate_counts, Shape{a.batch, 1, 1, 1});
        be.yolo_candidates(out, yolo_anchors_on(be, l), a, l.candidates, l.candidate_counts);
    }
    for (size_t h = 0; h < heads.size(); ++h) {  // counts first, then each image's used records
        const YoloLayer& l = net.yolo(heads[h]);
        const YoloDecodeArgs& a = args[h];
        std::vector<float> bits(a.batch);
        copy_to_host(l.candidate_counts, 0, (size_t)a.batch, bits.data());
        HeadCandidates& hc = result[heads[h]];
        hc.record = a.record;
        hc.images.resize(a.batch);
        size_t per_image = (size_t)a.anchors_used * a.plane;
        for (int b = 0; b < a.batch; ++b) {
            int32_t count;
            std::memcpy(&count, &bits[b], sizeof count);
            if (count < 0 || (size_t)count > per_image)
                throw DarknetError("yolo_candidates: image " + std::to_string(b) + " has " + std::to_string(count) +
                                   " candidates of " + std::to_string(per_image) + " predictions");
            std::vector<float>& recs = hc.images[b];
            recs.resize((size_t)count * a.record);
            copy_to_host(l.candidates, (size_t)b * per_image * a.record, recs.size(), recs.data());
            // Darknet's order (a device's atomic slots come in any order): anchor by anchor, each over
            // the locations, as hank-ai's get_network_boxes lists them (the same as get_detections)
            std::vector<int> order(count);
            std::vector<int64_t> key(count);
            for (int k = 0; k < count; ++k) {
                int64_t flat = (int64_t)recs[(size_t)k * a.record + YOLO_CAND_INDEX];  // loc * anchors_used + n
                key[k] = (flat % a.anchors_used) * a.plane + flat / a.anchors_used;
                order[k] = k;
            }
            std::sort(order.begin(), order.end(), [&](int p, int q) { return key[p] < key[q]; });
            std::vector<float> sorted(recs.size());
            for (int k = 0; k < count; ++k)
                std::copy_n(recs.begin() + (size_t)order[k] * a.record, a.record, sorted.begin() + (size_t)k * a.record);
            recs.swap(sorted);
        }
    }
    return result;
}

std::vector<Detection> get_detections(const Network& net, const Candidates& candidates, int b, int image_w,
                                      int image_h, bool letterbox) {
    check_image_size(b, image_w, image_h);
    std::vector<Detection> dets;
    int netw = net.options.width, neth = net.options.height;
    for (int li : net.yolo_layers()) {
        const HeadCandidates& hc = candidates.at(li);
        const std::vector<float>& recs = hc.images.at(b);
        int classes = hc.record - YOLO_CAND_PROB;
        size_t first = dets.size();
        for (size_t r = 0; r + hc.record <= recs.size(); r += hc.record) {
            const float* rec = recs.data() + r;
            Detection d;
            d.box = Box{rec[YOLO_CAND_BOX], rec[YOLO_CAND_BOX + 1], rec[YOLO_CAND_BOX + 2], rec[YOLO_CAND_BOX + 3]};
            d.objectness = rec[YOLO_CAND_OBJ];
            d.prob.assign(rec + YOLO_CAND_PROB, rec + YOLO_CAND_PROB + classes);
            dets.push_back(std::move(d));
        }
        correct_yolo_boxes(dets, first, image_w, image_h, netw, neth, letterbox);
    }
    return dets;
}

void nms(std::vector<Detection>& dets, float thresh, NmsKind kind, float beta_nms) {
    // Darknet (do_nms_sort, diounms_sort) first swaps each detection with zero objectness with the
    // last one not yet swapped (which reorders the others), then sorts and suppresses the others only;
    // we drop the zero ones (ours have none: get_detections keeps obj > thresh >= 0).
    size_t kept = dets.size();
    for (size_t i = 0; i < kept;) {
        if (dets[i].objectness == 0) std::swap(dets[i], dets[--kept]);
        else ++i;
    }
    dets.resize(kept);
    if (dets.empty()) return;
    int classes = (int)dets[0].prob.size();
    size_t n = dets.size();
    std::vector<size_t> order(n), rank(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    // Darknet sorts the detection array itself, class after class, so each pass starts from the
    // previous pass's order and the array ends sorted by the last class; the ties (most boxes have no
    // probability for that class) are left in the order of the sort algorithm: hank-ai's Darknet sorts
    // with std::sort, so we sort as GCC's std::sort does (gnu_sort.h), everywhere. That final order is
    // the order `detector map` collects detections in, which decides its TP/FP counts at the threshold
    // (evaluate.py), so we return it too. (AlexeyAB's Darknet sorts with qsort, whose ties depend on the
    // C library: glibc's merge sort up to 2.36 keeps them in place.)
    // Darknet compares every later box with every box, for every class (n^2/2 x classes IoUs: 257
    // million for yolov3-tiny at --thresh 0). Boxes that do not intersect have IoU 0 and DIoU <= 0, so
    // with thresh >= 0 they never suppress each other: list the intersecting pairs once (n^2/2 cheap
    // tests) and compare only those. The same pairs are compared in the same order: the same result.
    // (three flat arrays, not a vector per box: a video detects thousands of times and many small
    // allocations a call left the heap fragmented)
    std::vector<uint32_t> pairs, first(n + 1, 0), touching;
    for (size_t i = 0; i < n; ++i)
        for (size_t j = i + 1; j < n; ++j)
            if (thresh < 0 || box_intersection(dets[i].box, dets[j].box) != 0 ||
                box_intersection(dets[j].box, dets[i].box) != 0) {  // (NaN coordinates: both ways)
                pairs.push_back((uint32_t)i), pairs.push_back((uint32_t)j);
                ++first[i + 1], ++first[j + 1];
            }
    for (size_t i = 0; i < n; ++i) first[i + 1] += first[i];  // box i's neighbours: [first[i], first[i + 1])
    touching.resize(pairs.size());
    std::vector<uint32_t> fill(first.begin(), first.end() - 1);
    for (size_t p = 0; p < pairs.size(); p += 2)
        touching[fill[pairs[p]]++] = pairs[p + 1], touching[fill[pairs[p + 1]]++] = pairs[p];
    for (int k = 0; k < classes; ++k) {
        // the keys are this class's probabilities before this pass suppresses any of them
        gnu_sort(order.data(), order.data() + n, [&](size_t a, size_t b) { return dets[b].prob[k] < dets[a].prob[k]; });
        for (size_t i = 0; i < n; ++i) rank[order[i]] = i;
        for (size_t i = 0; i < n; ++i) {
            const Detection& a = dets[order[i]];
            if (a.prob[k] == 0) continue;
            for (uint32_t e = first[order[i]]; e < first[order[i] + 1]; ++e) {
                uint32_t other = touching[e];
                Detection& b = dets[other];
                if (rank[other] <= i || b.prob[k] == 0) continue;  // an earlier box, or already suppressed
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
    std::vector<Detection> sorted;
    sorted.reserve(dets.size());
    for (size_t i : order) sorted.push_back(std::move(dets[i]));
    dets.swap(sorted);
}

}  // namespace dn
