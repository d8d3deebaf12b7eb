// The YOLO loss with Darknet's semantics (yolo_layer.c forward_yolo_layer, training part):
// it writes dL/d(head input) into the head's delta and returns Darknet's per-head statistics.
// The loss logic itself is kernel text (kernels/yolo_loss.h), run by the backend's yolo_loss op:
// on a device the head never leaves it; only truths go up and a few per-image sums come down.
#pragma once
#include <memory>
#include <vector>

#include "../backend.h"
#include "../layers/yolo.h"
#include "box.h"

namespace dn {

class QueueMark;  // gpu/device.h

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

// A batch's truth boxes as the yolo_loss op reads them: a host tensor [batch, rows, 5] of x, y, w, h,
// class; rows = the most boxes of any image (at least 1), unused rows have class -1. Pack once per
// batch and move it to the device once (Backend::adopt) for all heads.
Tensor yolo_truths(const std::vector<std::vector<TruthBox>>& truths, int batch);

// `output`: the head's activated output [batch, anchors*(5+classes), h, w]; `grad`: receives dL/d(input)
// (same shape); `truths` from yolo_truths (in be's memory or not). netw/neth: network input size in
// pixels. Runs on `be` (the network's backend): its kernels on a device, host loops on the CPU.
YoloLossStats yolo_loss(Backend& be, const YoloLayer& layer, const Tensor& output, Tensor& grad, const Tensor& truths,
                        int netw, int neth);

// yolo_loss in two halves, for a training step that queues its backward and update before the
// statistics come down (the device never waits for the host in the middle of a step): queue_yolo_loss
// queues the op and leaves its per-image sums where the op wrote them; read_yolo_loss reduces them
// later, waiting only for the op (Device::download_marked), not for the work queued since.
struct QueuedYoloLoss {
    Tensor stats;                     // [batch, 1, 1, YOLO_LOSS_STATS] per-image sums, in the backend's memory
    std::shared_ptr<QueueMark> mark;  // the device's queue just after the op (null on the CPU, or unmarked)
    double predictions = 0;           // anchors x cells x images: no-obj's denominator
};
QueuedYoloLoss queue_yolo_loss(Backend& be, const YoloLayer& layer, const Tensor& output, Tensor& grad,
                               const Tensor& truths, int netw, int neth);
YoloLossStats read_yolo_loss(const QueuedYoloLoss& queued);

// The same with truths[b] = boxes of image b (packed and moved for this one head).
YoloLossStats yolo_loss(Backend& be, const YoloLayer& layer, const Tensor& output, Tensor& grad,
                        const std::vector<std::vector<TruthBox>>& truths, int netw, int neth);

// The layer's anchors then its mask, as the loss and decode kernels read them, in be's memory. Kept
// on the layer so that a device gets them once, not every iteration (another device re-uploads).
const Tensor& yolo_anchors_on(Backend& be, const YoloLayer& layer);

// The yolo_loss op on host tensors for images [b0, b1), through the kernel text's helpers: the
// reference backend runs all images in one loop, the cpu backend image ranges in parallel.
void yolo_loss_images(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                      Tensor& delta, Tensor& stats, int b0, int b1);

}  // namespace dn
