// From yolo-layer outputs to detections, as Darknet's `detector test` does it:
// decode boxes (get_yolo_box), undo letterboxing (correct_yolo_boxes), threshold, then NMS.
#pragma once
#include <vector>

#include "../network.h"
#include "box.h"

namespace dn {

struct Detection {
    Box box;                  // relative to the original image, centre form
    float objectness = 0;
    std::vector<float> prob;  // per class: objectness * class probability, 0 where <= thresh or suppressed
};

// Darknet's get_yolo_box: the box of anchor `n` (index into `anchors`) at cell (col, row) of a head
// whose outputs start at x[index], entries `stride` apart; relative to the network input.
Box get_yolo_box(const float* x, const std::vector<float>& anchors, int n, int index, int col, int row, int lw, int lh,
                 int netw, int neth, int stride, bool new_coords);

// The yolo layers' outputs of a forward pass on the host (one download each on a GPU; other layers
// left empty), for get_detections.
LayerOutputs heads_on_host(const Network& net, const LayerOutputs& outputs);

// Decodes every yolo layer of `net` for sample `b`; `heads` from heads_on_host.
std::vector<Detection> get_detections(const Network& net, const LayerOutputs& outputs, int b, int image_w, int image_h,
                                      float thresh, bool letterbox);

// ---- decode on the backend (the yolo_candidates op): only counts and used records come down ----
// One head's candidates for every image: records of `record` floats (kernels/yolo_decode.h), sorted
// by flat index (Darknet's decode order).
struct HeadCandidates {
    int record = 0;
    std::vector<std::vector<float>> images;  // per image: count * record floats
};
// Indexed by layer like LayerOutputs (only yolo layers filled).
using Candidates = std::vector<HeadCandidates>;

// Runs the yolo_candidates op of net's backend on every yolo head of `outputs` (a forward pass),
// then downloads each head's counts and, per image, the used part of its candidate buffer.
Candidates yolo_candidates(Network& net, const LayerOutputs& outputs, float thresh);

// get_detections from candidates: the same detections in the same order as from the heads.
std::vector<Detection> get_detections(const Network& net, const Candidates& candidates, int b, int image_w,
                                      int image_h, bool letterbox);

// The yolo_candidates op on host tensors for images [b0, b1), through the kernel text's helpers
// (the cpu and reference backends; records in flat-index order).
void yolo_candidates_images(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a, Tensor& candidates,
                            Tensor& counts, int b0, int b1);

// Darknet's do_nms_sort (default) or diounms_sort (greedy/diou/corners), in place; `dets` ends in
// Darknet's order after them (sorted by the last class's probability, ties by the classes before).
void nms(std::vector<Detection>& dets, float thresh, NmsKind kind, float beta_nms);

}  // namespace dn
