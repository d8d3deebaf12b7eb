"""Runs an exported Core ML detector (`darknet_py export ... -o X.mlpackage`) through Core ML on a Mac and
compares its detections with our CPU engine's on the same image: the same classes, boxes within 1 px.

    python tools/coreml_predict_check.py demo.mlpackage                   # the demo model, its sample image
    python tools/coreml_predict_check.py y.mlpackage --cfg yolov4-tiny.cfg --weights yolov4-tiny.weights \\
        --image photo.jpg --compute-units ALL

The image is resized to the model's input size first (without letterboxing, as the model expects), so
both sides see the same pixels; boxes are compared in those pixels, the model's clipped to the image as
Darknet clips its own. The model's class of a box is its highest confidence (Core ML's NMS keeps one
row per box). Exit code 0: equal; 1: they differ (both lists are printed); 2: no Core ML runtime here
(predict needs macOS). The macOS workflow runs it; it has not run on a Mac by hand yet.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Tuple

import numpy as np

Row = Tuple[int, float, float, float, float, float]  # class, confidence, x, y, w, h (pixels, top-left corner)


def coreml_rows(model, image_rgb: np.ndarray) -> List[Row]:
    from PIL import Image

    h, w = image_rgb.shape[:2]
    out = model.predict({"image": Image.fromarray(image_rgb)})
    rows = []
    for conf, (cx, cy, bw, bh) in zip(np.asarray(out["confidence"]), np.asarray(out["coordinates"])):
        x1, y1 = max((cx - bw / 2) * w, 0.0), max((cy - bh / 2) * h, 0.0)
        x2, y2 = min((cx + bw / 2) * w, w), min((cy + bh / 2) * h, h)
        c = int(np.argmax(conf))
        rows.append((c, float(conf[c]), x1, y1, x2 - x1, y2 - y1))
    return sorted(rows)


def compare(ours: List[Row], theirs: List[Row], px: float = 1.0) -> bool:
    if len(ours) != len(theirs):
        return False
    return all(a[0] == b[0] and max(abs(u - v) for u, v in zip(a[2:], b[2:])) <= px for a, b in zip(ours, theirs))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="the exported .mlpackage")
    p.add_argument("--cfg"), p.add_argument("--weights"), p.add_argument("--image")
    p.add_argument("--compute-units", default="CPU_ONLY", choices=["CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL"],
                   help="where Core ML runs the model (default: %(default)s, float32 as exported)")
    args = p.parse_args(argv)
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    import coremltools as ct
    import cv2

    import darknet_py
    from darknet_py.model_files.demo import demo_files

    if sys.platform != "darwin":
        print("no Core ML runtime here: MLModel.predict needs macOS", file=sys.stderr)
        return 2
    demo = demo_files()
    net = darknet_py.Network(args.cfg or demo["cfg"], args.weights or demo["weights"], device="cpu")
    model = ct.models.MLModel(args.model, compute_units=getattr(ct.ComputeUnit, args.compute_units))
    meta = model.user_defined_metadata
    thresh, nms = float(meta.get("darknet_py.thresh", 0.25)), float(meta.get("darknet_py.nms", 0.45))
    w, h = net.input_size
    image = cv2.resize(cv2.imread(args.image or demo["image"]), (w, h), interpolation=cv2.INTER_AREA)
    ours = sorted((d.class_id, d.confidence, *d.box) for d in net.detect(image, thresh=thresh, nms=nms, postproc="cpu"))
    theirs = coreml_rows(model, np.ascontiguousarray(image[:, :, ::-1]))
    same = compare(ours, theirs)
    for label, rows in (("darknet_py (cpu)", ours), ("Core ML", theirs)):
        print(f"{label}: {len(rows)} detections")
        for r in rows:
            print(f"  class {r[0]} conf {r[1]:.4f} box {r[2]:.1f} {r[3]:.1f} {r[4]:.1f} {r[5]:.1f}")
    print("same classes, boxes within 1 px" if same else "DIFFERENT detections")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
