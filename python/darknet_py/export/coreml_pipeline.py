"""The detector around the network for export_coreml, built the way Core ML's object detectors are
(coremltools' pipeline examples, Turi Create's and Apple's detectors), so that Xcode's preview and
Vision (VNRecognizedObjectObservation) read it:

  1. decode (add_decode, MIL operations appended to the network's ML Program): every yolo head as
     Darknet's detector decodes it (get_yolo_box; the constants from layer_common.decode_grid), giving
       raw_coordinates  (M, 4)  x, y, width, height of each candidate box, relative to the input (0..1),
                                x, y its centre
       raw_confidence   (M, C)  objectness x class probability, 0 where objectness <= thresh
  2. Core ML's NonMaximumSuppression model, per class (Darknet's do_nms_sort), with the class labels,
     outputting `confidence` (K, C) and `coordinates` (K, 4); its thresholds are optional inputs
     `iouThreshold` and `confidenceThreshold` (defaults: the export's --nms and --thresh).

make_pipeline chains the two in one Pipeline model.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .layer_common import decode_grid

CONFIDENCE, COORDINATES = "confidence", "coordinates"
RAW_CONFIDENCE, RAW_COORDINATES = "raw_confidence", "raw_coordinates"
IOU_THRESHOLD, CONFIDENCE_THRESHOLD = "iouThreshold", "confidenceThreshold"


def add_decode(mb: Any, heads: Sequence[Tuple[Any, Dict[str, Any], Tuple[int, int, int]]], net_wh: Tuple[int, int],
               thresh: float) -> Tuple[Any, Any]:
    """MIL operations decoding the activated heads [(var (1, A*(5+C), H, W), yolo_info, (c, h, w))];
    returns the vars (raw_confidence, raw_coordinates), candidates in Darknet's order, head by head."""
    netw, neth = net_wh
    confidences, coordinates = [], []
    for k, (head, info, shape) in enumerate(heads):
        anchors, entries = len(info["mask"]), 5 + info["classes"]
        _, h, w = shape
        m = h * w * anchors
        t = mb.reshape(x=head, shape=[anchors, entries, h * w], name=f"decode{k}_anchors")
        t = mb.transpose(x=t, perm=[2, 0, 1], name=f"decode{k}_by_cell")     # (HW, A, E)
        t = mb.reshape(x=t, shape=[m, entries], name=f"decode{k}_candidates")  # (M, E)

        def entry(lo: int, hi: int, name: str) -> Any:
            return mb.slice_by_index(x=t, begin=[0, lo], end=[m, hi], name=f"decode{k}_{name}")

        col, row, aw, ah = decode_grid(info, shape)
        # x = (col + tx) / w, y = (row + ty) / h; w = e^tw anchor_w / netw (new_coords: tw^2 4 anchor_w / netw)
        cells = np.stack([col, row], axis=1)
        xy = mb.mul(x=mb.add(x=entry(0, 2, "txy"), y=cells, name=f"decode{k}_cells"),
                    y=np.array([1.0 / w, 1.0 / h], np.float32), name=f"decode{k}_xy")
        twh = entry(2, 4, "twh")
        if info["new_coords"]:
            gwh = mb.mul(x=mb.mul(x=twh, y=twh, name=f"decode{k}_twh2"), y=np.float32(4.0), name=f"decode{k}_gwh")
        else:
            gwh = mb.exp(x=twh, name=f"decode{k}_gwh")
        wh = mb.mul(x=gwh, y=np.stack([aw / netw, ah / neth], axis=1).astype(np.float32), name=f"decode{k}_wh")
        coordinates.append(mb.concat(values=[xy, wh], axis=1, name=f"decode{k}_coordinates"))
        # Darknet keeps a candidate only when its objectness is above the threshold
        obj = entry(4, 5, "obj")
        kept = mb.select(cond=mb.greater(x=obj, y=np.float32(thresh), name=f"decode{k}_obj_above"), a=obj,
                         b=np.zeros((1, 1), np.float32), name=f"decode{k}_kept_obj")
        confidences.append(mb.mul(x=entry(5, entries, "cls"), y=kept, name=f"decode{k}_confidence"))
    conf = mb.concat(values=confidences, axis=0, name=RAW_CONFIDENCE) if len(heads) > 1 else \
        mb.identity(x=confidences[0], name=RAW_CONFIDENCE)
    coords = mb.concat(values=coordinates, axis=0, name=RAW_COORDINATES) if len(heads) > 1 else \
        mb.identity(x=coordinates[0], name=RAW_COORDINATES)
    return conf, coords


def nms_spec(ct: Any, network_spec: Any, labels: List[str], thresh: float, nms: float) -> Any:
    """Core ML's NonMaximumSuppression model reading the network model's raw outputs."""
    Model_pb2 = ct.proto.Model_pb2
    spec = Model_pb2.Model()
    spec.specificationVersion = network_spec.specificationVersion
    raw = {f.name: f for f in network_spec.description.output}
    for raw_name, name, width in ((RAW_CONFIDENCE, CONFIDENCE, len(labels)), (RAW_COORDINATES, COORDINATES, 4)):
        spec.description.input.add().CopyFrom(raw[raw_name])
        out = spec.description.output.add()
        out.CopyFrom(raw[raw_name])
        out.name = name
        array = out.type.multiArrayType  # K rows: as many as survive
        del array.shape[:]
        for lo, hi in ((0, -1), (width, width)):
            r = array.shapeRange.sizeRanges.add()
            r.lowerBound, r.upperBound = lo, hi
    for name, doc in ((IOU_THRESHOLD, f"NMS IoU threshold (default {nms})"),
                      (CONFIDENCE_THRESHOLD, f"confidence threshold (default {thresh})")):
        f = spec.description.input.add()
        f.name, f.shortDescription = name, doc
        f.type.doubleType.SetInParent()
        f.type.isOptional = True
    p = spec.nonMaximumSuppression
    p.confidenceInputFeatureName, p.coordinatesInputFeatureName = RAW_CONFIDENCE, RAW_COORDINATES
    p.confidenceOutputFeatureName, p.coordinatesOutputFeatureName = CONFIDENCE, COORDINATES
    p.iouThresholdInputFeatureName, p.confidenceThresholdInputFeatureName = IOU_THRESHOLD, CONFIDENCE_THRESHOLD
    # nms 0 turns NMS off as in `detect --nms 0`: an IoU threshold of 1 suppresses nothing
    p.iouThreshold = float(nms) if nms > 0 else 1.0
    p.confidenceThreshold = float(thresh)
    p.pickTop.perClass = True
    p.stringClassLabels.vector.extend(labels)
    return spec


def make_pipeline(ct: Any, network_spec: Any, labels: List[str], thresh: float, nms: float) -> Any:
    """The Pipeline spec: the network's ML Program (with its decode), then NonMaximumSuppression."""
    nms_model = nms_spec(ct, network_spec, labels, thresh, nms)
    spec = ct.proto.Model_pb2.Model()
    spec.specificationVersion = network_spec.specificationVersion
    spec.description.input.add().CopyFrom(network_spec.description.input[0])
    for f in nms_model.description.input[2:]:
        spec.description.input.add().CopyFrom(f)
    for f in nms_model.description.output:
        spec.description.output.add().CopyFrom(f)
    spec.description.output[0].shortDescription = "objectness x class probability of each kept box, per class"
    spec.description.output[1].shortDescription = "x, y (centre), width, height of each kept box, relative to the image"
    spec.pipeline.models.add().CopyFrom(network_spec)
    spec.pipeline.models.add().CopyFrom(nms_model)
    return spec
