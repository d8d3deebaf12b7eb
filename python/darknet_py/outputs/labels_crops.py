"""`detect --save-labels` and `--save-crops DIR`: detections written as training material.

Labels are Darknet's `detector test -save_labels` files: beside each image (the path Darknet's
replace_image_to_label gives, so `images/x.jpg` -> `labels/x.txt` where Darknet reads it back),
one line per detection, `class x_center y_center width height` relative to the image, as
`%d %2.4f %2.4f %2.4f %2.4f`. So a trained model pre-labels the next dataset, and `darknet_py
train` / `map` read them as ground truth. Crops are the detections' boxes cut from the image
(clipped to it), one JPEG each, in a folder per class name.

With tracking (`detect --track`), a label line has a sixth column, the detection's track id
(`class x_center y_center width height track_id`, -1 where the tracker has not confirmed the
object yet): such files are for reading tracks back, not for Darknet's training (which reads 5
columns). A video's tracks go to one file beside its annotated copy, OUT.tracks.txt, in the
MOTChallenge layout of `synth --video`'s ground truth: `frame,id,left,top,width,height,conf,class,-1`
(frames from 1, boxes in pixels, class the Darknet class id), which motmetrics and the MOTChallenge
tools read. Crops go by track: DIR/<class>/<track id>/<image or video frame>.jpg.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, List

import numpy as np

from ..data.darknet_files import replace_image_to_label
from ..network import Detection
from .files import write_image, write_text


def label_lines(detections: Iterable[Detection], width: int, height: int, tracked: bool = False) -> List[str]:
    """Darknet's -save_labels lines for detections in pixels of a `width` x `height` image. tracked
    (`detect --track`): a sixth column, the track id (-1: not yet confirmed by the tracker)."""
    return [f"{d.class_id} {(d.x + d.w / 2) / width:2.4f} {(d.y + d.h / 2) / height:2.4f} "
            f"{d.w / width:2.4f} {d.h / height:2.4f}"
            + (f" {d.track_id if d.track_id is not None else -1}" if tracked else "") + "\n" for d in detections]


def save_labels(image_path: str, detections: Iterable[Detection], width: int, height: int,
                tracked: bool = False) -> str:
    """Writes the label file of `image_path` (atomically); returns its path."""
    path = replace_image_to_label(image_path)
    write_text(path, "".join(label_lines(detections, width, height, tracked)), sync=False)
    return path


def _folder_name(name: str) -> str:
    # a class name is free text ("traffic light", "a/b"): keep it readable, never a path
    return re.sub(r"[^\w. -]", "_", name).strip(" .") or "class"


def save_crops(out_dir: str, stem: str, image: np.ndarray, detections: Iterable[Detection],
               by_track: bool = False) -> List[str]:
    """Writes each detection's box of `image` to `out_dir/<class name>/<stem>_<n>.jpg` (n counts the
    detections of this image from 0); boxes are clipped to the image, empty ones skipped. by_track
    (`detect --track`): `out_dir/<class name>/<track id>/<stem>.jpg` instead, a folder per object,
    and detections without a track id are skipped. Returns the paths."""
    height, width = image.shape[:2]
    paths = []
    for n, d in enumerate(detections):
        x0, y0 = max(0, int(round(d.x))), max(0, int(round(d.y)))
        x1, y1 = min(width, int(round(d.x + d.w))), min(height, int(round(d.y + d.h)))
        if x1 <= x0 or y1 <= y0:
            continue
        if by_track:
            if d.track_id is None:
                continue
            path = os.path.join(out_dir, _folder_name(d.class_name), str(d.track_id), f"{stem}.jpg")
        else:
            path = os.path.join(out_dir, _folder_name(d.class_name), f"{stem}_{n}.jpg")
        write_image(path, np.ascontiguousarray(image[y0:y1, x0:x1]), sync=False)
        paths.append(path)
    return paths


def mot_lines(frame: int, detections: Iterable[Detection]) -> List[str]:
    """MOTChallenge lines (frame,id,left,top,width,height,conf,class,-1) of a frame's tracked detections."""
    return [f"{frame},{d.track_id},{d.x:.2f},{d.y:.2f},{d.w:.2f},{d.h:.2f},{d.confidence:.4f},{d.class_id},-1\n"
            for d in detections if d.track_id is not None]
