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

// Darknet's do_nms_sort (default) or diounms_sort (greedy/diou/corners), in place.
void nms(std::vector<Detection>& dets, float thresh, NmsKind kind, float beta_nms);

}  // namespace dn
