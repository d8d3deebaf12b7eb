"""`map --save-errors DIR`: the images where the detector went wrong at the confidence threshold,
with what went wrong drawn on them (confusion.ImageOutcome per image).

Colours: a missed truth (FN) magenta, labelled "FN <class>"; a false positive red, "FP <class> <conf>";
one that overlaps a truth of another class orange, "FP <class> <conf> (is <truth class>)"; the
true positives thin green, for context. Each image keeps its file name (as a .jpg); images of the
same name from different folders get their index in the list as a prefix.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import List, Sequence

import numpy as np

from .confusion import ImageOutcome
from ..outputs.draw import draw_label

RED, ORANGE, MAGENTA, GREEN = (0, 0, 230), (0, 140, 255), (200, 0, 200), (0, 170, 0)


def _rect(image: np.ndarray, box: np.ndarray, colour, thick: int) -> tuple:
    import cv2

    h, w = image.shape[:2]
    x, y, bw, bh = box
    a = (int(round(x * w)), int(round(y * h)))
    b = (int(round((x + bw) * w)), int(round((y + bh) * h)))
    cv2.rectangle(image, a, b, colour, thick)
    return a


def draw_errors(image: np.ndarray, o: ImageOutcome, names: Sequence[str]) -> np.ndarray:
    """A copy of `image` with the outcome drawn; boxes in fractions of the image size."""
    out = image.copy()
    thick = max(2, round(min(out.shape[:2]) / 250))

    def name(c: int) -> str:
        return names[c] if c < len(names) else str(c)

    for d in np.flatnonzero(o.tp):
        _rect(out, o.det_boxes[d], GREEN, 1)
    for t in np.flatnonzero(o.missed | o.confused):
        if o.missed[t]:
            x, y = _rect(out, o.truth_boxes[t], MAGENTA, thick)
            draw_label(out, f"FN {name(int(o.truth_classes[t]))}", x, y, MAGENTA)
    for d in np.flatnonzero(o.fp):
        t = int(o.confused_with[d])
        colour = ORANGE if t >= 0 else RED
        x, y = _rect(out, o.det_boxes[d], colour, thick)
        text = f"FP {name(int(o.det_classes[d]))} {o.det_conf[d]:.2f}"
        if t >= 0:
            text += f" (is {name(int(o.truth_classes[t]))})"
        draw_label(out, text, x, y, colour)
    return out


def save_error_images(folder: str, paths: Sequence[str], outcomes: Sequence[ImageOutcome],
                      names: Sequence[str]) -> List[str]:
    """Writes the images with a FP or FN into `folder`; returns the paths written."""
    from ..outputs.files import write_image
    from ..media.sources import read_image

    stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    repeated = {s for s, n in Counter(stems).items() if n > 1}
    written = []
    for i, (path, o) in enumerate(zip(paths, outcomes)):
        if not o.has_errors:
            continue
        stem = f"{i:06d}_{stems[i]}" if stems[i] in repeated else stems[i]
        target = os.path.join(folder, stem + ".jpg")
        write_image(target, draw_errors(read_image(path), o, names))
        written.append(target)
    return written
