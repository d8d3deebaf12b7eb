"""Evaluation plots as PNGs, drawn with OpenCV (no plotting dependency): the confusion matrix
(counts and row-normalized), and per class the precision-recall curve and the F1, precision and
recall against the confidence threshold, the plots Ultralytics' `val` writes.

The curves use the AP's matching (rank order, evaluate.py): at confidence c, precision and recall
of the detections above c. The PR curve is the precision envelope the AP integrates.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ..outputs.files import write_image
from ..outputs.draw import class_color

GRID = np.linspace(0.0, 1.0, 1001)  # confidence thresholds of the curves
W, H = 900, 700
LEFT, RIGHT, TOP, BOTTOM = 80, 230, 50, 70
BLACK, GRAY, LIGHT, BLUE = (0, 0, 0), (150, 150, 150), (225, 225, 225), (200, 80, 0)
PLOT_FILES = ("confusion_matrix.png", "confusion_matrix_normalized.png", "PR_curve.png", "F1_curve.png",
              "P_curve.png", "R_curve.png")


@dataclass
class Curves:
    precision: np.ndarray  # classes x len(GRID): precision at each confidence threshold
    recall: np.ndarray  # classes x len(GRID)
    pr_recall: List[np.ndarray]  # per class, recall at each rank
    pr_precision: List[np.ndarray]  # per class, the precision envelope at each rank
    truths: np.ndarray

    @property
    def f1(self) -> np.ndarray:
        s = self.precision + self.recall
        return np.where(s > 0, 2 * self.precision * self.recall / np.where(s > 0, s, 1), 0.0)


def curves(conf: np.ndarray, cls: np.ndarray, tp: np.ndarray, truths: np.ndarray) -> Curves:
    """From every detection's confidence, class and TP flag in rank order (best first)."""
    k = len(truths)
    p = np.zeros((k, GRID.size))
    r = np.zeros((k, GRID.size))
    pr_r, pr_p = [], []
    for c in range(k):
        sel = cls == c
        conf_c, tp_c = conf[sel], tp[sel]
        ctp = np.cumsum(tp_c)
        prec = ctp / np.arange(1, tp_c.size + 1) if tp_c.size else np.zeros(0)
        rec = ctp / truths[c] if truths[c] else np.zeros(tp_c.size)
        # above threshold t: the detections with conf > t, a prefix of the ranking
        n_above = np.searchsorted(-conf_c, -GRID, side="left")
        has = n_above > 0
        p[c, has] = prec[n_above[has] - 1]
        r[c, has] = rec[n_above[has] - 1]
        p[c, ~has] = 1.0  # no detection: nothing wrong yet (Ultralytics draws 1 there too)
        pr_r.append(rec)
        pr_p.append(np.maximum.accumulate(prec[::-1])[::-1] if prec.size else prec)
    return Curves(p, r, pr_r, pr_p, np.asarray(truths))


# ---- drawing -----------------------------------------------------------------------------------
def _canvas(title: str, xlabel: str, ylabel: str):
    import cv2

    img = np.full((H, W, 3), 255, np.uint8)
    x0, x1, y0, y1 = LEFT, W - RIGHT, TOP, H - BOTTOM
    font = cv2.FONT_HERSHEY_SIMPLEX
    for k in range(11):
        x = int(round(x0 + (x1 - x0) * k / 10))
        y = int(round(y1 - (y1 - y0) * k / 10))
        cv2.line(img, (x0, y), (x1, y), LIGHT, 1)
        cv2.line(img, (x, y0), (x, y1), LIGHT, 1)
        cv2.putText(img, f"{k / 10:.1f}", (x0 - 35, y + 4), font, 0.4, BLACK, 1, cv2.LINE_AA)
        cv2.putText(img, f"{k / 10:.1f}", (x - 10, y1 + 18), font, 0.4, BLACK, 1, cv2.LINE_AA)
    cv2.rectangle(img, (x0, y0), (x1, y1), GRAY, 1)
    cv2.putText(img, title, (x0 + 120, y0 - 18), font, 0.6, BLACK, 1, cv2.LINE_AA)
    cv2.putText(img, xlabel, ((x0 + x1) // 2 - 40, y1 + 45), font, 0.5, BLACK, 1, cv2.LINE_AA)
    cv2.putText(img, ylabel, (5, y0 - 18), font, 0.5, BLACK, 1, cv2.LINE_AA)
    return img, (x0, x1, y0, y1)


def line_plot(path: str, title: str, xlabel: str, ylabel: str,
              series: Sequence[Tuple[str, np.ndarray, np.ndarray, Tuple[int, int, int], int]]) -> str:
    """Lines (name, x, y, BGR colour, thickness) on [0, 1] x [0, 1], with a legend on the right."""
    import cv2

    img, (x0, x1, y0, y1) = _canvas(title, xlabel, ylabel)
    font = cv2.FONT_HERSHEY_SIMPLEX
    for n, (name, xs, ys, colour, thick) in enumerate(series):
        if len(xs):
            pts = np.stack([x0 + (x1 - x0) * np.clip(xs, 0, 1), y1 - (y1 - y0) * np.clip(ys, 0, 1)], axis=1)
            cv2.polylines(img, [np.round(pts).astype(np.int32).reshape(-1, 1, 2)], False, colour, thick, cv2.LINE_AA)
        ly = y0 + 10 + 22 * n
        if ly < y1:
            cv2.line(img, (x1 + 15, ly - 4), (x1 + 40, ly - 4), colour, max(2, thick), cv2.LINE_AA)
            cv2.putText(img, name[:24], (x1 + 48, ly), font, 0.45, BLACK, 1, cv2.LINE_AA)
    return write_image(path, img)


def confusion_image(path: str, matrix: np.ndarray, names: Sequence[str], normalize: bool) -> str:
    """The matrix as a grid: rows = truth (then background), columns = prediction (then missed);
    cells shaded by the row-normalized value, written as counts or as fractions of the row."""
    import cv2

    m = np.asarray(matrix, dtype=np.float64)
    rows = m.sum(axis=1, keepdims=True)
    frac = np.where(rows > 0, m / np.where(rows > 0, rows, 1), 0.0)
    k = m.shape[0]
    labels = [str(n) for n in names] + ["background"]
    cols = [str(n) for n in names] + ["missed"]
    cell = max(24, min(70, 700 // k))
    left, top = 150, 110
    img = np.full((top + cell * k + 40, left + cell * k + 40, 3), 255, np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX
    scale = 0.35 if cell < 45 else 0.45
    title = "Confusion matrix" + (" (normalized by row: each truth class)" if normalize else " (counts)")
    cv2.putText(img, title, (10, 25), font, 0.55, BLACK, 1, cv2.LINE_AA)
    cv2.putText(img, "predicted ->", (left, 50), font, 0.45, BLACK, 1, cv2.LINE_AA)
    cv2.putText(img, "truth", (10, top - 10), font, 0.45, BLACK, 1, cv2.LINE_AA)
    for j, name in enumerate(cols):  # column labels, slanted by position
        cv2.putText(img, name[:10], (left + j * cell + 2, top - 8 - (j % 2) * 16), font, scale, BLACK, 1, cv2.LINE_AA)
    for i in range(k):
        cv2.putText(img, labels[i][:18], (10, top + i * cell + cell // 2 + 4), font, scale, BLACK, 1, cv2.LINE_AA)
        for j in range(k):
            v = frac[i, j]
            shade = (int(255 - 200 * v), int(255 - 120 * v), int(255 - 30 * v))  # white to dark orange-blue
            a, b = (left + j * cell, top + i * cell), (left + (j + 1) * cell, top + (i + 1) * cell)
            cv2.rectangle(img, a, b, shade, -1)
            cv2.rectangle(img, a, b, GRAY, 1)
            if m[i, j]:
                text = f"{v:.2f}" if normalize else str(int(m[i, j]))
                colour = (255, 255, 255) if v > 0.6 else BLACK
                cv2.putText(img, text, (a[0] + 3, a[1] + cell // 2 + 4), font, scale, colour, 1, cv2.LINE_AA)
    return write_image(path, img)


def write_plots(folder: str, curves_: Curves, matrix: np.ndarray, names: Sequence[str]) -> Dict[str, str]:
    """All the PNGs (PLOT_FILES) into `folder`; returns {file name: path}."""
    k = len(curves_.truths)
    names = [names[c] if c < len(names) else str(c) for c in range(k)]
    colours = [class_color(c, k) for c in range(k)]
    with_truth = curves_.truths > 0
    out = {}
    for normalize, name in ((False, PLOT_FILES[0]), (True, PLOT_FILES[1])):
        out[name] = confusion_image(os.path.join(folder, name), matrix, names, normalize)
    aps = [float(np.sum(np.diff(np.concatenate(([0.0], r))) * p)) if r.size else 0.0
           for r, p in zip(curves_.pr_recall, curves_.pr_precision)]
    pr = [(f"{names[c]} {aps[c]:.3f}", curves_.pr_recall[c], curves_.pr_precision[c], colours[c], 1)
          for c in range(k)]
    pr.append((f"all classes {np.mean(aps):.3f} mAP", np.zeros(0), np.zeros(0), BLUE, 3))
    out[PLOT_FILES[2]] = line_plot(os.path.join(folder, PLOT_FILES[2]), "Precision-Recall curve", "Recall",
                                   "Precision", pr)
    for fname, label, values in ((PLOT_FILES[3], "F1", curves_.f1), (PLOT_FILES[4], "Precision", curves_.precision),
                                 (PLOT_FILES[5], "Recall", curves_.recall)):
        mean = values[with_truth].mean(axis=0) if with_truth.any() else np.zeros(GRID.size)
        best = int(np.argmax(mean))
        series = [(names[c], GRID, values[c], colours[c], 1) for c in range(k)]
        series.append((f"all {mean[best]:.2f} at {GRID[best]:.2f}", GRID, mean, BLUE, 3))
        out[fname] = line_plot(os.path.join(folder, fname), f"{label}-Confidence curve", "Confidence", label, series)
    return out
