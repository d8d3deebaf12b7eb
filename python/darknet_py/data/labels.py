"""Label files (`class cx cy w h` per line, normalised to the image) and the bad-data reporter.

Bad data never stops loading: each problem is reported once per file (with its path) and the
data is skipped or kept as Darknet does:

- missing or unreadable image: skipped, another image is drawn in its place (loader.py);
- missing label file: Darknet prints "Can't open label file" and trains the image as background;
- empty label file: trained as background (Darknet says nothing; we report it, it is often a mistake);
- a class id outside [0, classes): the box is skipped (Darknet's "Wrong annotation: class_id");
- coordinates outside [0, 1]: kept and clipped to the image after augmentation (correct_boxes);
  boxes wholly outside the image, or with x = y = 0, are dropped there, as Darknet does;
- a line that is not `int float float float float`, or w/h <= 0, or NaN: that line is skipped
  (Darknet's fscanf loop would silently stop reading the file there).
"""
from __future__ import annotations

import math
import threading
import warnings
from typing import Callable, List, Optional, Tuple

import numpy as np


class DataWarning(UserWarning):
    """A problem with a training image or label file; loading went on without it."""


class DataReporter:
    """Reports each (kind, path) problem once: to `callback(kind, path, message)` if given, else as
    a DataWarning. Thread-safe: the loader's workers share one. `problems` keeps them all."""

    def __init__(self, callback: Optional[Callable[[str, str, str], None]] = None) -> None:
        self.callback = callback
        self.problems: List[Tuple[str, str, str]] = []
        self._seen: set = set()
        self._lock = threading.Lock()

    def report(self, kind: str, path: str, message: str) -> bool:
        """Reports `message` about `path` unless this kind of problem was reported for it already.
        Returns whether it was reported now."""
        with self._lock:
            if (kind, path) in self._seen:
                return False
            self._seen.add((kind, path))
            self.problems.append((kind, path, message))
        if self.callback is not None:
            self.callback(kind, path, message)
        else:
            warnings.warn(DataWarning(message), stacklevel=2)
        return True

    def count(self, kind: Optional[str] = None) -> int:
        with self._lock:
            return sum(1 for k, _, _ in self.problems if kind is None or k == kind)


def _parse_line(text: str) -> Optional[Tuple[int, float, float, float, float]]:
    fields = text.split()
    if len(fields) < 5:  # extra fields are ignored, as Darknet's fscanf does
        return None
    try:
        cls = int(fields[0])
        x, y, w, h = (float(v) for v in fields[1:5])
    except ValueError:
        return None
    return cls, x, y, w, h


def read_labels(label_path: str, classes: int, reporter: Optional[DataReporter] = None) -> np.ndarray:
    """The boxes of one label file as a (n, 5) float32 array: class, cx, cy, w, h (normalised to the
    image, not yet clipped). Problems are reported to `reporter` (see the module docstring)."""
    reporter = reporter if reporter is not None else DataReporter()
    try:
        with open(label_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except FileNotFoundError:
        reporter.report("missing-label", label_path,
                        f"{label_path}: no label file: the image is trained as background (no objects)")
        return np.zeros((0, 5), np.float32)
    except OSError as e:
        reporter.report("unreadable-label", label_path,
                        f"{label_path}: cannot read the label file ({e.strerror}): the image is trained as background")
        return np.zeros((0, 5), np.float32)

    rows = []
    bad_syntax, bad_class, bad_coords, bad_size = [], [], [], []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        parsed = _parse_line(raw)
        if parsed is None or not all(math.isfinite(v) for v in parsed[1:]):
            bad_syntax.append((number, raw.strip()))
            continue
        cls, x, y, w, h = parsed
        if not 0 <= cls < classes:
            bad_class.append((number, cls))
            continue
        if w <= 0 or h <= 0:
            bad_size.append((number, w, h))
            continue
        # a box may overhang the border by rounding: only an overhang above 0.1 % counts
        overhang = min(x - w / 2, y - h / 2) < -1e-3 or max(x + w / 2, y + h / 2) > 1 + 1e-3
        if not (0 <= x <= 1 and 0 <= y <= 1) or w > 1 or h > 1 or overhang or (x == 0 and y == 0):
            bad_coords.append((number, x, y, w, h))
        rows.append((cls, x, y, w, h))

    if bad_syntax:
        n, line = bad_syntax[0]
        reporter.report("bad-line", label_path,
                        f"{label_path}:{n}: {len(bad_syntax)} line(s) not `class cx cy w h` (e.g. {line!r}): skipped")
    if bad_class:
        n, cls = bad_class[0]
        reporter.report("bad-class", label_path,
                        f"{label_path}:{n}: {len(bad_class)} box(es) with a class id outside [0, {classes - 1}] "
                        f"(e.g. {cls}): skipped")
    if bad_size:
        n, w, h = bad_size[0]
        reporter.report("bad-size", label_path,
                        f"{label_path}:{n}: {len(bad_size)} box(es) with w or h <= 0 (e.g. w={w:g} h={h:g}): skipped")
    if bad_coords:
        n, x, y, w, h = bad_coords[0]
        reporter.report("bad-coords", label_path,
                        f"{label_path}:{n}: {len(bad_coords)} box(es) reach outside [0, 1] "
                        f"(e.g. {x:g} {y:g} {w:g} {h:g}): clipped to the image; dropped if wholly outside or at x = y = 0")
    if not rows and not (bad_syntax or bad_class or bad_size):
        reporter.report("empty-label", label_path,
                        f"{label_path}: empty label file: the image is trained as background (no objects)")
    return np.array(rows, np.float32).reshape(-1, 5)


def darknet_truth(boxes: np.ndarray) -> np.ndarray:
    """(n, 5) class-first boxes -> Darknet's truth order x, y, w, h, class (what Net.yolo_loss takes)."""
    boxes = np.asarray(boxes, np.float32).reshape(-1, 5)
    return np.ascontiguousarray(boxes[:, [1, 2, 3, 4, 0]])


def dense_truth(truths: List[np.ndarray], max_boxes: int) -> np.ndarray:
    """A batch's truths as Darknet's dense (N, max_boxes, 5) array, x, y, w, h, class per row and
    zero rows after the last box (Darknet stops at the first x == 0)."""
    out = np.zeros((len(truths), max_boxes, 5), np.float32)
    for i, t in enumerate(truths):
        t = darknet_truth(t)[:max_boxes]
        out[i, : len(t)] = t
    return out
