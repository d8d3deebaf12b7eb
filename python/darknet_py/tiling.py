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
one large box, which must not swallow the tiles' detections of them. Last, a box cut by a tile
border that lies more than `merge` within a more confident box of another class (not cut, not of
the whole image, at least as large) is dropped: a piece's class is the least reliable guess, and
the neighbouring tile saw the object whole (docs/tiled_inference.md: 6.7 % of the detections on a
4K image's shapes were such duplicates without this step).
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


def _overlaps(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(overlap widths, overlap heights) of each x0, y0, x1, y1 box of `a` with each of `b`
    (negative: the gap between them)."""
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    return iw, ih


def _areas(b: np.ndarray) -> np.ndarray:
    return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])


def _ios_iou(a: np.ndarray, b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Intersection over the smaller area, and over the union, of each box of `a` with each of `b`."""
    iw, ih = _overlaps(a, b)
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    aa, ab = _areas(a)[:, None], _areas(b)[None, :]
    return inter / np.maximum(np.minimum(aa, ab), 1e-9), inter / np.maximum(aa + ab - inter, 1e-9)


def _join_cut(boxes: np.ndarray, conf: np.ndarray,
              members: List[List[int]]) -> Tuple[np.ndarray, np.ndarray, List[List[int]]]:
    """Cut boxes that meet (overlap, or lie within EDGE of each other) joined into their union, until
    no two meet (a union can reach a box neither of its parts met)."""
    while len(boxes) > 1:
        iw, ih = _overlaps(boxes, boxes)
        meet = (iw >= -EDGE) & (ih >= -EDGE)
        # connected groups: the label of each box is the smallest index it reaches
        label = np.arange(len(boxes))
        while True:
            reached = np.where(meet, label[None, :], len(boxes)).min(axis=1)
            new = np.minimum(label, reached)
            if (new == label).all():
                break
            label = new
        if len(np.unique(label)) == len(boxes):
            break
        groups = [np.flatnonzero(label == g) for g in np.unique(label)]
        boxes = np.array([[*boxes[g, :2].min(axis=0), *boxes[g, 2:].max(axis=0)] for g in groups])
        members = [[m for i in g for m in members[i]] for g in groups]
        conf = np.array([conf[g].max() for g in groups])
    return boxes, conf, members


def merge_detections(items: Sequence[Tuple["Detection", bool, bool]], merge: float = 0.5) -> List["Detection"]:
    """(detection in image coordinates, whether it touches an inner tile border, whether it comes from
    the whole image) -> merged detections."""
    import dataclasses

    merged: List[tuple] = []  # (box, confidence, cut, of the whole image, detection)
    for cls in sorted({it[0].class_id for it in items}):
        dets = [it for it in items if it[0].class_id == cls]
        box = np.array([[d.x, d.y, d.x + d.w, d.y + d.h] for d, _, _ in dets], float).reshape(-1, 4)
        conf = np.array([d.confidence for d, _, _ in dets], float)
        cut = np.array([c for _, c, _ in dets], bool)
        whole = np.array([w for _, _, w in dets], bool)
        # 1. join the pieces of objects cut by tile borders (a joined box keeps its most confident
        # piece's detection)
        c = np.flatnonzero(cut)
        cb, cc, cm = _join_cut(box[c], conf[c], [[int(i)] for i in c])
        rest = np.flatnonzero(~cut)
        box = np.concatenate([cb, box[rest]])
        first = [max(m, key=lambda i: conf[i]) for m in cm] + [int(i) for i in rest]
        conf = np.concatenate([cc, conf[rest]])
        whole = np.concatenate([np.zeros(len(cb), bool), whole[rest]])
        cut = np.concatenate([np.ones(len(cb), bool), np.zeros(len(rest), bool)])
        # 2. greedy merging of the same object seen more than once, from the most confident down: a box
        # joins the first kept box that covers more than `merge` of the smaller of the two; a
        # whole-image box (coarse: it may span a cluster of small objects) joins another only at
        # IoU > merge, never by containing it
        order = np.argsort(-conf, kind="stable")
        kept: List[list] = []  # [box, confidence, detection, whole, cut]
        kept_boxes = np.zeros((0, 4))
        kept_whole = np.zeros(0, bool)
        for i in order:
            if len(kept):
                ios, iou = _ios_iou(box[i:i + 1], kept_boxes)
                score = np.where(whole[i] | kept_whole, iou[0], ios[0])
                hit = np.flatnonzero(score > merge)
                if len(hit):
                    k = kept[hit[0]]
                    k[0] = _union(k[0], box[i])
                    k[4] = k[4] and bool(cut[i])
                    kept_boxes[hit[0]] = k[0]
                    continue
            kept.append([box[i].copy(), float(conf[i]), dets[first[i]][0], bool(whole[i]), bool(cut[i])])
            kept_boxes = np.concatenate([kept_boxes, box[i:i + 1]])
            kept_whole = np.append(kept_whole, whole[i])
        for b, cf, det, wh, ct in kept:
            merged.append((b, cf, ct, wh, dataclasses.replace(det, confidence=cf, x=float(b[0]), y=float(b[1]),
                                                              w=float(b[2] - b[0]), h=float(b[3] - b[1]))))
    # 3. a piece cut by a tile border that lies within a more confident box of another class is that
    # object, seen whole by a neighbouring tile: a piece's class is the least reliable guess (a box of
    # the whole image may span a cluster: it absorbs nothing here either)
    merged.sort(key=lambda m: -m[1])
    if not merged:
        return []
    boxes = np.array([m[0] for m in merged])
    cls = np.array([m[4].class_id for m in merged])
    cut = np.array([m[2] for m in merged])
    absorber = ~cut & ~np.array([m[3] for m in merged])
    ios, _ = _ios_iou(boxes, boxes)
    area = _areas(boxes)
    earlier = np.arange(len(merged))[:, None] > np.arange(len(merged))[None, :]
    inside = ((ios > merge) & earlier & absorber[None, :] & (cls[:, None] != cls[None, :])
              & (area[:, None] <= area[None, :]))
    drop = cut & inside.any(axis=1)
    return [m[4] for m, d in zip(merged, drop) if not d]


def _union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])])


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
