"""Tracking scores (MOTA, IDF1, ID switches) of tracks against MOTChallenge ground truth, with
motmetrics (MIT; `pip install motmetrics`, in the test extra).

Both inputs are MOTChallenge rows: frame, id, left, top, width, height, ... (gt.txt of `synth
--video`, OUT.tracks.txt of `detect --track --save-labels`). As MOTChallenge does, ground-truth
objects less visible than `min_visibility` are neither required nor held against the tracker: a
track box that matches one (IoU >= `iou`) and no required object is left out, and so is the object.
A track box matches an object at IoU >= `iou` (0.5, MOTChallenge's).
"""
from __future__ import annotations

from typing import Dict

import numpy as np


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every (left, top, width, height) box of `a` with every one of `b`: (len(a), len(b))."""
    a, b = np.asarray(a, float).reshape(-1, 4), np.asarray(b, float).reshape(-1, 4)
    ax1, ay1, bx1, by1 = a[:, 0] + a[:, 2], a[:, 1] + a[:, 3], b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]
    iw = np.clip(np.minimum(ax1[:, None], bx1[None]) - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
    ih = np.clip(np.minimum(ay1[:, None], by1[None]) - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
    inter = iw * ih
    union = (a[:, 2] * a[:, 3])[:, None] + (b[:, 2] * b[:, 3])[None] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0)


def mot_scores(gt: np.ndarray, tracks: np.ndarray, iou: float = 0.5, min_visibility: float = 0.5) -> Dict[str, float]:
    """{"mota", "idf1", "id_switches", "false_positives", "misses", "objects", "precision", "recall"}."""
    import motmetrics as mm

    gt, tracks = np.asarray(gt, float), np.asarray(tracks, float)
    gt = gt.reshape(-1, gt.shape[-1] if gt.size else 9)
    tracks = tracks.reshape(-1, tracks.shape[-1] if tracks.size else 9)
    acc = mm.MOTAccumulator(auto_id=False)
    frames = np.union1d(gt[:, 0], tracks[:, 0]).astype(int)
    for f in frames:
        g, h = gt[gt[:, 0] == f], tracks[tracks[:, 0] == f]
        keep, ignored = g[g[:, 8] >= min_visibility], g[g[:, 8] < min_visibility]
        if len(h) and len(ignored):
            to_ignored = box_iou(h[:, 2:6], ignored[:, 2:6]).max(axis=1) >= iou
            to_kept = (box_iou(h[:, 2:6], keep[:, 2:6]).max(axis=1) >= iou) if len(keep) else np.zeros(len(h), bool)
            h = h[~(to_ignored & ~to_kept)]
        dist = 1 - box_iou(keep[:, 2:6], h[:, 2:6])
        dist[dist > 1 - iou] = np.nan
        acc.update(keep[:, 1].astype(int).tolist(), h[:, 1].astype(int).tolist(), dist, frameid=int(f))
    names = ["mota", "idf1", "num_switches", "num_false_positives", "num_misses", "num_objects", "precision", "recall"]
    row = mm.metrics.create().compute(acc, metrics=names, name="all").iloc[0]
    return {"mota": float(row["mota"]), "idf1": float(row["idf1"]), "id_switches": int(row["num_switches"]),
            "false_positives": int(row["num_false_positives"]), "misses": int(row["num_misses"]),
            "objects": int(row["num_objects"]), "precision": float(row["precision"]), "recall": float(row["recall"])}
