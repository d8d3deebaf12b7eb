"""Detection post-processing as ONNX nodes (`export --postprocess`): the yolo heads decoded as
Darknet's detector does it (get_yolo_box, objectness x class probability above the threshold), then
ONNX's NonMaxSuppression per class over all heads together, as Darknet's do_nms_sort.

Outputs, one row per kept (box, class), K rows for the whole batch:
  boxes        (K, 4) float32  x1, y1, x2, y2 relative to the network input (0..1), clipped to it
  scores       (K,)   float32  objectness x class probability
  classes      (K,)   int64
  batch_index  (K,)   int64    which image of the batch
Multiply the boxes by an image's width and height for pixels (the input was resized without
letterboxing, as `darknet_py detect` does by default).
"""
from __future__ import annotations

import warnings
from typing import List, Sequence, Tuple

import numpy as np

from .layer_common import decode_grid
from .onnx_graph import Graph

OUTPUTS = ("boxes", "scores", "classes", "batch_index")


def _decode_head(g: Graph, head: str, info: dict, shape: Tuple[int, int, int], net_wh: Tuple[int, int],
                 hint: str) -> Tuple[str, str, str]:
    """One activated head (N, A*(5+C), H, W) -> centre-form boxes (N, H*W*A, 4), class scores
    (N, H*W*A, C) and objectness (N, H*W*A, 1), candidates in Darknet's order (cell by cell, anchor by
    anchor)."""
    anchors = len(info["mask"])
    classes = info["classes"]
    entries = 5 + classes
    _, h, w = shape
    netw, neth = net_wh
    t = g.reshape(head, [-1, anchors, entries, h * w], f"{hint}_anchors")
    t = g.node("Transpose", [t], f"{hint}_by_cell", perm=[0, 3, 1, 2])       # (N, HW, A, E)
    t = g.reshape(t, [-1, h * w * anchors, entries], f"{hint}_candidates")  # (N, M, E)

    def entry(lo: int, hi: int, name: str) -> str:
        return g.slice(t, [lo], [hi], [2], f"{hint}_{name}")

    col, row, aw, ah = (v.reshape(1, -1, 1) for v in decode_grid(info, shape))
    # x = (col + tx) / lw, y = (row + ty) / lh; w = e^tw anchor_w / netw (new_coords: tw^2 4 anchor_w / netw)
    bx = g.scalar_op("Div", g.node("Add", [entry(0, 1, "tx"), g.const(col, f"{hint}_col")], f"{hint}_colx"), w,
                     f"{hint}_bx")
    by = g.scalar_op("Div", g.node("Add", [entry(1, 2, "ty"), g.const(row, f"{hint}_row")], f"{hint}_rowy"), h,
                     f"{hint}_by")
    tw, th = entry(2, 3, "tw"), entry(3, 4, "th")
    if info["new_coords"]:
        gw = g.scalar_op("Mul", g.node("Mul", [tw, tw], f"{hint}_tw2"), 4.0, f"{hint}_gw")
        gh = g.scalar_op("Mul", g.node("Mul", [th, th], f"{hint}_th2"), 4.0, f"{hint}_gh")
    else:
        gw, gh = g.node("Exp", [tw], f"{hint}_gw"), g.node("Exp", [th], f"{hint}_gh")
    bw = g.scalar_op("Div", g.node("Mul", [gw, g.const(aw, f"{hint}_aw")], f"{hint}_bw_px"), netw, f"{hint}_bw")
    bh = g.scalar_op("Div", g.node("Mul", [gh, g.const(ah, f"{hint}_ah")], f"{hint}_bh_px"), neth, f"{hint}_bh")
    boxes = g.node("Concat", [bx, by, bw, bh], f"{hint}_boxes", axis=2)
    obj = entry(4, 5, "obj")
    scores = g.node("Mul", [obj, entry(5, entries, "cls")], f"{hint}_scores")
    return boxes, scores, obj


def add_postprocess(g: Graph, heads: Sequence[Tuple[str, dict, Tuple[int, int, int]]], net_wh: Tuple[int, int],
                    thresh: float, nms: float) -> List[str]:
    """Appends decoding and NMS after the heads [(tensor, yolo_info, (c, h, w))]; returns the output names
    (OUTPUTS). nms <= 0 keeps every candidate above the threshold (no suppression), as `detect --nms 0`."""
    kinds = sorted({h[1]["nms_kind"] for h in heads} - {"default", "cornersnms"})
    if kinds and nms > 0:
        warnings.warn(f"the cfg asks for {', '.join(kinds)}; ONNX's NonMaxSuppression suppresses by plain IoU "
                      f"(Darknet's default NMS), so a few overlapping boxes may differ from darknet_py detect",
                      stacklevel=5)  # the caller of Network.export_onnx
    boxes, scores = [], []
    for k, (head, info, shape) in enumerate(heads):
        b, s, obj = _decode_head(g, head, info, shape, net_wh, f"pp{k}")
        # Darknet keeps a candidate only when its objectness is above the threshold
        keep = g.node("Cast", [g.scalar_op("Greater", obj, thresh, f"pp{k}_obj_above")], f"pp{k}_keep", to=1)
        boxes.append(b)
        scores.append(g.node("Mul", [s, keep], f"pp{k}_kept_scores"))
    boxes_all = boxes[0] if len(boxes) == 1 else g.node("Concat", boxes, "pp_boxes", axis=1)     # (N, M, 4)
    scores_all = scores[0] if len(scores) == 1 else g.node("Concat", scores, "pp_scores", axis=1)  # (N, M, C)
    per_class = g.node("Transpose", [scores_all], "pp_scores_by_class", perm=[0, 2, 1])            # (N, C, M)
    total = sum(int(np.prod(h[2][1:])) * len(h[1]["mask"]) for h in heads)
    if nms > 0:
        selected = g.node("NonMaxSuppression",
                          [boxes_all, per_class, g.ints([total], "pp_max_per_class"),
                           g.const(np.array([nms], np.float32), "pp_iou"),
                           g.const(np.array([thresh], np.float32), "pp_thresh")],
                          "pp_nms", center_point_box=1)                                            # (K, 3)
    else:
        above = g.scalar_op("Greater", per_class, thresh, "pp_above")
        selected = g.node("Transpose", [g.node("NonZero", [above], "pp_nonzero")], "pp_nms", perm=[1, 0])
    batch = g.slice(selected, [0], [1], [1], "pp_batch")
    cls = g.slice(selected, [1], [2], [1], "pp_class")
    cand = g.slice(selected, [2], [3], [1], "pp_cand")
    box = g.node("GatherND", [boxes_all, g.node("Concat", [batch, cand], "pp_box_index", axis=1)], "pp_box")  # (K, 4)
    score = g.node("GatherND", [per_class, selected], "pp_score")                                           # (K,)
    # corners, clipped to the image (Darknet's detections in pixels are clipped the same way)
    xy, wh = g.slice(box, [0], [2], [1], "pp_xy"), g.slice(box, [2], [4], [1], "pp_wh")
    half = g.scalar_op("Div", wh, 2.0, "pp_half")
    zero, one = g.const(np.float32(0), "pp_zero"), g.const(np.float32(1), "pp_one")
    lo = g.node("Clip", [g.node("Sub", [xy, half], "pp_lo_raw"), zero, one], "pp_lo")
    hi = g.node("Clip", [g.node("Add", [xy, half], "pp_hi_raw"), zero, one], "pp_hi")
    corners = g.node("Concat", [lo, hi], "pp_corners", axis=1)
    # a box entirely outside the image has no area left after clipping: Darknet drops it
    size = g.node("Sub", [hi, lo], "pp_size")
    positive = g.node("Cast", [g.scalar_op("Greater", size, 0.0, "pp_positive")], "pp_positive_f", to=1)
    valid = g.node("ReduceMin", [positive], "pp_valid_f", axes=[1], keepdims=0)
    valid = g.node("Cast", [valid], "pp_valid", to=9)
    squeeze = g.ints([1], "pp_squeeze_axis")
    outs = [
        g.node("Compress", [corners, valid], out="boxes", axis=0),
        g.node("Compress", [score, valid], out="scores", axis=0),
        g.node("Compress", [g.node("Squeeze", [cls, squeeze], "pp_class_1d"), valid], out="classes", axis=0),
        g.node("Compress", [g.node("Squeeze", [batch, squeeze], "pp_batch_1d"), valid], out="batch_index", axis=0),
    ]
    return outs
