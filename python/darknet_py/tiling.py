"""Tiled inference (`detect --tiles auto|RxC --tile-overlap F`, Network.detect_tiled): small objects
in a large image, found at their own size.

The image is cut into overlapping tiles; with "auto" each tile is the network's input size in the
image's own pixels (so a tile is not shrunk before the network sees it), as many as cover the image
with at least `overlap` (a fraction of the tile) shared between neighbours; "RxC" cuts R rows and C
columns whatever their size. The whole image, downscaled as usual, is added to the same batch so
that objects larger than a tile are still found; of its detections, only those larger than half a
tile (in width or height) are kept: the tiles see the smaller ones whole and at a finer scale. All
of them run as one batch (one forward pass).

Merging: each detection is moved into the image's coordinates. A box that touches an inner border
of its tile (within 4 px) may be an object cut by that border: cut boxes of one class that meet
(overlap or touch) are joined into their union. Then, per class, from the most confident down, a
box absorbs every other box that overlaps it by more than `merge` of the smaller one's area (the
union box, the highest confidence): the same object seen by two overlapping tiles becomes one
detection. A box of the whole image merges with another only where their IoU exceeds `merge`
(the same object at about the same size): downscaled, a cluster of small objects may come out as
one large box, which must not swallow the tiles' detections of them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, List, Sequence, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    from .network import Detection, Network

Tile = Tuple[int, int, int, int]  # x0, y0, x1, y1 (exclusive ends)
EDGE = 4.0  # pixels: a box this close to an inner tile border may be cut by it


def parse_tiles(text: str) -> Union[str, Tuple[int, int]]:
    """'auto' or 'RxC' (rows x columns, each >= 1)."""
    if text == "auto":
        return "auto"
    parts = text.lower().split("x")
    try:
        rows, cols = int(parts[0]), int(parts[1])
        if len(parts) != 2 or rows < 1 or cols < 1:
            raise ValueError
    except (ValueError, IndexError):
        raise ValueError(f"--tiles takes auto or RxC (rows x columns, e.g. 2x3), got {text!r}") from None
    return rows, cols


def _spans(length: int, n: int, size: int) -> List[Tuple[int, int]]:
    if n <= 1 or size >= length:
        return [(0, length)]
    step = (length - size) / (n - 1)
    return [(int(round(i * step)), int(round(i * step)) + size) for i in range(n)]


def tile_grid(width: int, height: int, net_size: Tuple[int, int], tiles: Union[str, Tuple[int, int]],
              overlap: float = 0.2) -> List[Tile]:
    """The tiles of a width x height image (see the module docstring)."""
    if not 0 <= overlap < 1:
        raise ValueError(f"tile overlap must be in [0, 1), got {overlap}")
    if tiles == "auto":
        tw, th = min(net_size[0], width), min(net_size[1], height)
        cols = 1 if tw >= width else math.ceil((width - tw) / (tw * (1 - overlap))) + 1
        rows = 1 if th >= height else math.ceil((height - th) / (th * (1 - overlap))) + 1
    else:
        rows, cols = tiles  # type: ignore[misc]
        tw = min(width, math.ceil(width / (cols - (cols - 1) * overlap)))
        th = min(height, math.ceil(height / (rows - (rows - 1) * overlap)))
    return [(x0, y0, x1, y1) for y0, y1 in _spans(height, rows, th) for x0, x1 in _spans(width, cols, tw)]


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])])


def _ios(a: np.ndarray, b: np.ndarray) -> float:
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return float(iw * ih / max(smaller, 1e-9))


def _meet(a: np.ndarray, b: np.ndarray) -> bool:
    return min(a[2], b[2]) - max(a[0], b[0]) >= -EDGE and min(a[3], b[3]) - max(a[1], b[1]) >= -EDGE


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return float(inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter))


def merge_detections(items: Sequence[Tuple["Detection", bool, bool]], merge: float = 0.5) -> List["Detection"]:
    """(detection in image coordinates, whether it touches an inner tile border, whether it comes from
    the whole image) -> merged detections."""
    import dataclasses

    out: List["Detection"] = []
    for cls in sorted({it[0].class_id for it in items}):
        group = [(np.array([d.x, d.y, d.x + d.w, d.y + d.h], float), d.confidence, cut, d, whole)
                 for d, cut, whole in items if d.class_id == cls]
        # 1. join the pieces of objects cut by tile borders
        changed = True
        while changed:
            changed = False
            for i in range(len(group)):
                for j in range(i + 1, len(group)):
                    if group[i][2] and group[j][2] and _meet(group[i][0], group[j][0]):
                        a, b = group[i], group[j]
                        group[i] = (_union(a[0], b[0]), max(a[1], b[1]), True, a[3] if a[1] >= b[1] else b[3], False)
                        del group[j]
                        changed = True
                        break
                if changed:
                    break
        # 2. greedy merging of the same object seen more than once; a whole-image box (coarse: it may
        # span a cluster of small objects) joins another only at IoU > merge, never by containing it
        group.sort(key=lambda g: -g[1])
        kept: List[list] = []
        for box, conf, _, det, whole in group:
            for k in kept:
                if (_iou(k[0], box) if whole or k[3] else _ios(k[0], box)) > merge:
                    k[0] = _union(k[0], box)
                    break
            else:
                kept.append([box, conf, det, whole])
        for box, conf, det, _ in kept:
            out.append(dataclasses.replace(det, confidence=conf, x=float(box[0]), y=float(box[1]),
                                           w=float(box[2] - box[0]), h=float(box[3] - box[1])))
    out.sort(key=lambda d: -d.confidence)
    return out


def detect_tiled(net: "Network", image: np.ndarray, tiles: Union[str, Tuple[int, int]] = "auto",
                 overlap: float = 0.2, thresh: float = 0.25, nms: float = 0.45, letterbox: bool = False,
                 merge: float = 0.5) -> List["Detection"]:
    """Detections of the tiles and the whole image, merged (see the module docstring)."""
    import dataclasses

    height, width = image.shape[:2]
    grid = tile_grid(width, height, net.input_size, tiles, overlap)
    crops = [np.ascontiguousarray(image[y0:y1, x0:x1]) for x0, y0, x1, y1 in grid]
    if len(grid) > 1:
        crops.append(image)
    blob = np.stack([net.preprocess(c, letterbox) for c in crops])
    per = net.detect_blob(blob, [(c.shape[1], c.shape[0]) for c in crops], thresh, nms, letterbox)
    items = []
    tw, th = max(x1 - x0 for x0, _, x1, _ in grid), max(y1 - y0 for _, y0, _, y1 in grid)
    for k, dets in enumerate(per):
        x0, y0, x1, y1 = grid[k] if k < len(grid) else (0, 0, width, height)
        for d in dets:
            if k >= len(grid) and d.w <= tw / 2 and d.h <= th / 2:
                continue  # an object this small is seen whole, at a finer scale, by a tile

            d = dataclasses.replace(d, x=d.x + x0, y=d.y + y0)
            cut = ((x0 > 0 and d.x <= x0 + EDGE) or (y0 > 0 and d.y <= y0 + EDGE)
                   or (x1 < width and d.x + d.w >= x1 - EDGE) or (y1 < height and d.y + d.h >= y1 - EDGE))
            items.append((d, bool(cut) and k < len(grid), k >= len(grid)))
    return merge_detections(items, merge)
