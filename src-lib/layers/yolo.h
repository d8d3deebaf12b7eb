// [yolo]: a detection head. Forward applies the head's activations (Darknet's yolo layer output);
// decoding to boxes lives in yolo/decode.cpp, the loss (training) in yolo/loss.cpp.
#pragma once
#include "layer.h"

namespace dn {

enum class NmsKind { default_nms, greedy, diou, corners };

// Everything a [yolo] section says; the training options are kept for the loss.
struct YoloSpec {
    int classes = 20;
    int num = 1;                 // anchors listed
    std::vector<int> mask;       // anchors this head uses
    std::vector<float> anchors;  // 2 * num values, in network-input pixels
    float scale_x_y = 1.0f;
    bool new_coords = false;
    NmsKind nms_kind = NmsKind::default_nms;
    float beta_nms = 0.6f;
    // training
    float jitter = 0.2f, ignore_thresh = 0.5f, truth_thresh = 1.0f, iou_thresh = 1.0f;
    float iou_normalizer = 0.75f, obj_normalizer = 1.0f, cls_normalizer = 1.0f, delta_normalizer = 1.0f;
    float label_smooth_eps = 0.0f, max_delta = 3.4e38f, resize = 1.0f;
    int random = 0, max_boxes = 200, objectness_smooth = 0;
    bool focal_loss = false;  // Darknet's focal_loss=1: class deltas scaled by the focal factor (yolo_loss.h)
    std::string iou_loss = "mse";
};

class YoloLayer final : public Layer {
public:
    const char* type() const override { return "yolo"; }
    bool runs_channels_last() const override { return true; }  // its output stays NCHW (Network::output_layout)
    void forward(Backend& be, const Tensor& x, Tensor& y, const LayerOutputs&) override;
    // The loss (yolo/loss.cpp) writes dL/d(head input) into this layer's delta, as Darknet's yolo layer
    // does (its logistic + BCE / MSE deltas are taken w.r.t. the logits), so backward passes it through:
    // from fp32 into the layer below's storage type, times delta_scale (fp16's loss scale, loss_scale.h).
    void backward(Backend& be, const Tensor&, const Tensor&, Tensor& dy, Tensor* dx, const LayerOutputs&,
                  std::vector<Tensor>&) override {
        if (!dx) return;
        if (delta_scale == 1.0f && dx->dtype() == dy.dtype() && dx->layout() == dy.layout())
            be.add_channels(dy, 0, *dx, 0, dy.shape().c);
        else be.add_scaled(dy, delta_scale, *dx);
    }
    float delta_scale = 1.0f;  // set by Network::backward
    std::string describe() const override;
    YoloGeom geom() const {
        return YoloGeom{(int)spec.mask.size(), spec.classes, spec.new_coords, spec.scale_x_y};
    }
    YoloSpec spec;
    // The anchors and mask as the loss op reads them, kept where the loss last ran (yolo/loss.cpp):
    // a cache, so that a device gets them once and not every training iteration.
    mutable Tensor loss_anchors;
    // Detection's candidate records and per-image counts (yolo/detect.cpp), kept where detect last ran.
    mutable Tensor candidates, candidate_counts;
};

}  // namespace dn
