"""What became of each detection and each truth at the confidence threshold, and the confusion
matrix built from it.

Per image, at `--thresh` and `--iou-thresh`:
- a detection counted as a TP (evaluate.py's rule, Darknet's by default) takes its truth;
- each remaining detection above the threshold (a FP), in the detector's order, takes the unclaimed
  truth of ANOTHER class it overlaps most (IoU above the threshold): the detector saw the object
  but named it wrongly; a FP that overlaps no such truth is a detection of background;
- a truth neither taken by a TP nor by a wrong-class detection was missed.

The confusion matrix, (classes + 1) x (classes + 1): row = the truth's class, with a last
"background" row; column = the detection's class, with a last "missed" column. Every truth is in
exactly one cell of its class's row, so a row sums to that class's truths; the diagonal is the TP
count of each class; a column sums to the detections of that class above the threshold (the
"missed" column: the truths no detection found). Same-class duplicates stay FPs of the background
row, so that the diagonal is exactly the TP count Darknet prints.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

from .box_iou import iou_matrix


@dataclass
class ImageOutcome:
    det_boxes: np.ndarray  # n x 4 (x, y, w, h, top-left), in the units they were given
    det_classes: np.ndarray
    det_conf: np.ndarray
    tp: np.ndarray  # per detection: a TP above the threshold
    fp: np.ndarray  # per detection: a FP above the threshold
    confused_with: np.ndarray  # per detection: the truth index it overlaps (a wrong-class FP), else -1
    truth_boxes: np.ndarray
    truth_classes: np.ndarray
    found: np.ndarray  # per truth: taken by a TP
    confused: np.ndarray  # per truth: taken by a detection of another class

    @property
    def missed(self) -> np.ndarray:
        return ~self.found & ~self.confused

    @property
    def has_errors(self) -> bool:
        return bool(self.fp.any() or (~self.found).any())


def per_image_outcomes(image_boxes: Sequence[Tuple[np.ndarray, np.ndarray, np.ndarray]], classes: np.ndarray,
                       conf: np.ndarray, tp: np.ndarray, above: np.ndarray, truth: np.ndarray,
                       iou_thresh: float) -> List[ImageOutcome]:
    """`image_boxes`: per image (detections n x 4, truths m x 4, truth classes); `classes`, `conf`,
    `tp`, `above`, `truth` (the global index of each detection's best truth): every image's
    detections back to back in the detector's order."""
    out: List[ImageOutcome] = []
    d0 = t0 = 0
    for db, tb, tc in image_boxes:
        n, m = len(db), len(tb)
        tp_i = tp[d0:d0 + n] & above[d0:d0 + n]
        fp_i = ~tp[d0:d0 + n] & above[d0:d0 + n]
        found = np.zeros(m, dtype=bool)
        found[truth[d0:d0 + n][tp_i] - t0] = True
        confused = np.zeros(m, dtype=bool)
        confused_with = np.full(n, -1, dtype=np.int64)
        o = ImageOutcome(db, classes[d0:d0 + n], conf[d0:d0 + n], tp_i, fp_i, confused_with, tb, tc, found, confused)
        _assign_confusions(o, iou_thresh)
        out.append(o)
        d0 += n
        t0 += m
    return out


def _assign_confusions(o: ImageOutcome, iou_thresh: float) -> None:
    if not o.fp.any() or not len(o.truth_boxes):
        return
    iou = iou_matrix(o.det_boxes, o.truth_boxes)
    for d in np.flatnonzero(o.fp):  # the detector's order
        free = ~o.found & ~o.confused & (o.truth_classes != o.det_classes[d]) & (iou[d] > iou_thresh)
        if free.any():
            t = int(np.argmax(np.where(free, iou[d], -1.0)))
            o.confused[t] = True
            o.confused_with[d] = t


def confusion_matrix(outcomes: Sequence[ImageOutcome], classes: int) -> np.ndarray:
    """The (classes + 1) x (classes + 1) counts described in the module doc."""
    m = np.zeros((classes + 1, classes + 1), dtype=np.int64)
    for o in outcomes:
        np.add.at(m, (o.det_classes[o.tp], o.det_classes[o.tp]), 1)
        for d in np.flatnonzero(o.fp):
            t = o.confused_with[d]
            m[o.truth_classes[t] if t >= 0 else classes, o.det_classes[d]] += 1
        np.add.at(m, (o.truth_classes[o.missed], classes), 1)
    return m
