// GpuBackend's yolo loss: the three launches of kernels/yolo_loss_kernels.h (pass order and grids
// documented there). The head, its delta, the truths and the anchors stay on the device; the host
// reads back only `stats` (YOLO_LOSS_STATS floats per image).
#include "../kernels/yolo_decode.h"
#include "../kernels/yolo_loss.h"
#include "gpu_backend.h"

namespace dn {

void GpuBackend::yolo_loss(const Tensor& output, const Tensor& truths, const Tensor& anchors, const YoloLossArgs& a,
                           Tensor& delta, Tensor& stats) {
    size_t predictions = (size_t)a.batch * a.anchors_used * a.plane;
    launch("yolo_loss_objectness_f32", predictions, {buf(output), buf(truths), buf(anchors), buf(delta)}, a);
    launch("yolo_loss_truths_f32", (size_t)a.batch, {buf(output), buf(truths), buf(anchors), buf(delta), buf(stats)}, a);
    launch_groups("yolo_loss_finish_f32", (size_t)a.batch, {buf(output), buf(delta), buf(stats)}, a);
}

// Detection's decode (kernels/yolo_decode_kernels.h): counts zeroed, then one thread per prediction.
void GpuBackend::yolo_candidates(const Tensor& output, const Tensor& anchors, const YoloDecodeArgs& a,
                                 Tensor& candidates, Tensor& counts) {
    fill(counts, 0.0f);  // the bits of 0.0f are those of int 0
    size_t predictions = (size_t)a.batch * a.anchors_used * a.plane;
    launch("yolo_candidates_f32", predictions, {buf(output), buf(anchors), buf(candidates), buf(counts)}, a);
}

}  // namespace dn
