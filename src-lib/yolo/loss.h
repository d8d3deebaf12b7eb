// The YOLO loss with Darknet's semantics (yolo_layer.c forward_yolo_layer, training part):
// it writes dL/d(head input) into the head's delta and returns Darknet's per-head statistics.
#pragma once
#include <vector>

#include "../layers/yolo.h"
#include "box.h"

namespace dn {

// A ground-truth box relative to the network input (0..1, centre form) and its class.
struct TruthBox {
    Box box;
    int cls = 0;
};

struct YoloLossStats {
    double loss = 0;       // Darknet's cost: sum of squared deltas over the head
    double avg_iou = 0;    // mean IoU of assigned predictions with their truths
    double avg_class = 0;  // mean probability of the true class at assigned predictions
    double avg_obj = 0;    // mean objectness at assigned predictions
    double avg_noobj = 0;  // mean objectness over all predictions
    double recall50 = 0, recall75 = 0;
    int count = 0;         // assigned (truth, anchor) pairs
};

// `output`: the head's activated output [batch, anchors*(5+classes), h, w]; `grad`: receives dL/d(input)
// (same shape); truths[b]: boxes of image b. netw/neth: network input size in pixels.
YoloLossStats yolo_loss(const YoloLayer& layer, const Tensor& output, Tensor& grad,
                        const std::vector<std::vector<TruthBox>>& truths, int netw, int neth);

}  // namespace dn
