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

// Decodes every yolo layer of `net` for sample `b` of the last forward pass.
std::vector<Detection> get_detections(const Network& net, const LayerOutputs& outputs, int b, int image_w, int image_h,
                                      float thresh, bool letterbox);

// Darknet's do_nms_sort (default) or diounms_sort (greedy/diou/corners), in place.
void nms(std::vector<Detection>& dets, float thresh, NmsKind kind, float beta_nms);

}  // namespace dn
