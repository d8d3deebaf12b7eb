"""A large synth image with many small shapes and their boxes: the test scene of tiled inference
(src-test/test_tiles.py, benchmarks/compare_tiling.py). The shapes sit on a jittered grid (`spacing`
pixels apart, so two never touch), each of the synth set's classes in turn, at a circumradius drawn
from `radius`; `extra` adds shapes at given centres (a shape on a tile border, say). The classes
are the first `classes` synth shapes in turn (4: the demo model's circle, square, triangle, star)."""
from __future__ import annotations

from typing import List, Sequence, Tuple

import cv2
import numpy as np

from .synth import SHAPES, _colours, _shape_mask, background


def large_image(seed: int = 0, size: Tuple[int, int] = (1536, 1152), radius: Tuple[float, float] = (16, 26),
                spacing: int = 160, extra: Sequence[Tuple[float, float]] = (),
                classes: int = 4) -> Tuple[np.ndarray, np.ndarray, List[int]]:
    """(BGR image, boxes (n, 4) as left, top, width, height of each shape's pixels, class ids)."""
    rng = np.random.default_rng(seed)
    w, h = size
    img = background(rng, w, h)
    margin, jitter = int(round(spacing * 0.69)), spacing / 8
    centres = [(x + rng.uniform(-jitter, jitter), y + rng.uniform(-jitter, jitter))
               for y in range(margin, h - spacing // 2 + 20, spacing)
               for x in range(margin, w - spacing // 2 + 20, spacing)] + list(extra)
    boxes, ids = [], []
    colours = _colours(rng, len(centres), vivid=True)
    for k, (cx, cy) in enumerate(centres):
        cls = k % classes
        (x0, y0, x1, y1), polys, mask = _shape_mask(SHAPES[cls], float(rng.uniform(*radius)),
                                                    float(rng.uniform(0, 6.3)), cx, cy, w, h)
        cv2.fillPoly(img[y0:y1, x0:x1], polys, colours[k], lineType=cv2.LINE_8, shift=4)
        ys, xs = np.nonzero(mask)
        boxes.append((x0 + xs.min(), y0 + ys.min(), xs.max() - xs.min() + 1, ys.max() - ys.min() + 1))
        ids.append(cls)
    return img, np.array(boxes, float).reshape(-1, 4), ids
