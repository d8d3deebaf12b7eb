"""Anchors from a dataset: Darknet's `detector calc_anchors` and the `calc_anchors` command.

Darknet's algorithm (hank-ai darknet src-lib/detector.cpp calc_anchors, src-lib/matrix.cpp
do_kmeans): every training box as (w * width, h * height) in network pixels; k-means with the
distance 1 - IoU of two boxes sharing a corner; the first centers are k distinct boxes drawn at
random; then assign every box to its nearest center (the first on ties) and move each center to
the mean of its boxes (a center with no box stays), until no assignment changes or 1000 rounds.
The anchors are sorted by area, smallest first (anchors_data_comparator), printed truncated to
integers as `anchors=w, h, w, h, ...`, with the average over the boxes of the IoU with their
nearest anchor. Darknet draws its first centers with C's rand(); we draw them from a seeded NumPy
generator, so one run's anchors differ from Darknet's but are as good, and `--restarts R` keeps
the best (highest average IoU) of R seeds.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Sequence, Tuple

import numpy as np

from ..commands.argtypes import positive_int

MAX_ROUNDS = 1000


def box_iou_wh(boxes: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """IoU of every (w, h) box with every (w, h) center, the two sharing a corner (n x k)."""
    inter = np.minimum(boxes[:, None, 0], centers[None, :, 0]) * np.minimum(boxes[:, None, 1], centers[None, :, 1])
    union = (boxes[:, 0] * boxes[:, 1])[:, None] + (centers[:, 0] * centers[:, 1])[None, :] - inter
    return inter / union


@dataclass
class Anchors:
    anchors: np.ndarray  # k x 2 (w, h), smallest area first
    avg_iou: float  # mean over the boxes of the IoU with their nearest anchor
    rounds: int  # k-means rounds until no assignment changed
    seed: int


def kmeans_iou(boxes: np.ndarray, k: int, first: Sequence[int]) -> Tuple[np.ndarray, int]:
    """Darknet's do_kmeans from the centers boxes[first]: (centers k x 2, rounds)."""
    centers = boxes[np.asarray(first)].astype(np.float64).copy()
    assign = np.zeros(len(boxes), dtype=np.int64)  # Darknet's calloc

    def maximize() -> None:
        for j in range(k):
            members = boxes[assign == j]
            if len(members):  # a center without boxes keeps its place
                centers[j] = members.mean(axis=0)

    if k == 1:
        maximize()
    rounds = 0
    while rounds < MAX_ROUNDS:
        nearest = np.argmax(box_iou_wh(boxes, centers), axis=1)  # least 1 - IoU; the first on ties
        if np.array_equal(nearest, assign):
            break
        assign = nearest
        maximize()
        rounds += 1
    return centers, rounds


def calc_anchors(boxes: np.ndarray, k: int, seed: int = 0, restarts: int = 1) -> Anchors:
    """The best of `restarts` k-means runs (seeds seed, seed+1, ...) over (w, h) `boxes`."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 2)
    if len(boxes) < k:
        raise ValueError(f"{len(boxes)} boxes for {k} clusters: need at least as many boxes as clusters")
    best = None
    for r in range(restarts):
        first = np.random.default_rng(seed + r).permutation(len(boxes))[:k]
        centers, rounds = kmeans_iou(boxes, k, first)
        centers = centers[np.argsort(centers[:, 0] * centers[:, 1], kind="stable")]
        avg = float(np.mean(np.max(box_iou_wh(boxes, centers), axis=1)))
        if best is None or avg > best.avg_iou:
            best = Anchors(centers, avg, rounds, seed + r)
    assert best is not None
    return best


def format_anchors(anchors: np.ndarray, width: int) -> str:
    """Darknet's anchors line: integers (truncated) for a network wider than 32, else 4 decimals."""
    if width > 32:
        return ", ".join(f"{int(w)}, {int(h)}" for w, h in anchors)
    return ", ".join(f"{w:2.4f},{h:2.4f}" for w, h in anchors)


def training_boxes(data: str, width: int, height: int, warn: Callable[[str], None]) -> Tuple[np.ndarray, List[int], int]:
    """(boxes n x 2 in network pixels, boxes per class, images) of the train list of `data`."""
    from ..data.darknet_files import label_path_for, read_data_file, read_image_list
    from ..data.labels import DataReporter, read_labels

    spec = read_data_file(data)
    classes = spec.require("classes")
    train = spec.require("train")
    if not os.path.exists(train):
        raise FileNotFoundError(f"{spec.where('train')}: the train list {train} does not exist")
    paths = read_image_list(train)
    quiet = ("missing-label", "empty-label")
    reporter = DataReporter(lambda kind, path, message: None if kind in quiet else warn(message))
    boxes, counts = [], [0] * classes
    for p in paths:
        for c, _, _, w, h in read_labels(label_path_for(p), classes, reporter):
            if w > 0 and h > 0:
                boxes.append((float(w) * width, float(h) * height))
                counts[int(c)] += 1
    return np.array(boxes, dtype=np.float64).reshape(-1, 2), counts, len(paths)


def head_masks(cfg: str, clusters: int) -> List[List[int]]:
    """Masks for the [yolo] heads of `cfg`, in file order: the anchors split evenly, the head with
    the coarsest grid (largest objects) getting the largest anchors, as in Darknet's cfgs."""
    from .. import _core

    net = _core.Net(cfg, "cpu")
    heads = list(net.yolo_layers)
    if not heads or clusters % len(heads):
        raise ValueError(f"{cfg}: {len(heads)} [yolo] heads: --num-of-clusters must be a multiple of it, got {clusters}")
    per = clusters // len(heads)
    cells = [net.layers()[i]["output"][1] * net.layers()[i]["output"][2] for i in heads]
    order = sorted(range(len(heads)), key=lambda j: cells[j])  # coarsest grid first
    masks: List[List[int]] = [[] for _ in heads]
    for rank, j in enumerate(order):
        top = clusters - rank * per
        masks[j] = list(range(top - per, top))
    return masks


# ---- the command ------------------------------------------------------------------------------
CALC_ANCHORS_EXAMPLES = """\
Reads every box of DATA's train list, scales it to the network size and clusters the sizes with
k-means on the distance 1 - IoU (Darknet's detector calc_anchors). Prints the anchors as Darknet
does, smallest first, and the average IoU of each box with its nearest anchor (higher is better).

examples:
  darknet_py calc_anchors shapes/shapes.data --num-of-clusters 6 --width 416 --height 416
  darknet_py calc_anchors my.data --num-of-clusters 6 --width 416 --height 416 --restarts 20 \\
      --cfg yolov4-tiny.cfg -o my-yolov4-tiny.cfg
"""


def _multiple_of_32(text: str) -> int:
    v = positive_int(text)
    if v < 32 or v % 32:
        raise argparse.ArgumentTypeError(f"must be a multiple of 32 of at least 32 (as Darknet requires), got {v}")
    return v


def add_parser(sub: Any, formatter: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("calc_anchors", help="anchors for a dataset by k-means (Darknet's detector calc_anchors)",
                       description="Compute anchors for a dataset, as Darknet's `detector calc_anchors`.",
                       epilog=CALC_ANCHORS_EXAMPLES, formatter_class=formatter)
    p.add_argument("data", metavar="DATA", help="Darknet .data file or Ultralytics dataset YAML (its train list)")
    p.add_argument("--num-of-clusters", type=positive_int, required=True, metavar="N", help="number of anchors")
    p.add_argument("--width", type=_multiple_of_32, required=True, help="network input width")
    p.add_argument("--height", type=_multiple_of_32, required=True, help="network input height")
    p.add_argument("--restarts", type=positive_int, default=1, metavar="R",
                   help="keep the best of R k-means runs with seeds S..S+R-1 (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the first run (default: %(default)s)")
    p.add_argument("--cfg", metavar="CFG", help="also write the anchors (and masks) into a copy of this cfg")
    p.add_argument("-o", "--output", metavar="OUT.cfg", help="where --cfg's copy goes (required with --cfg)")
    p.set_defaults(func=cmd_calc_anchors, parser=p)
    return p


def cmd_calc_anchors(args: argparse.Namespace) -> int:
    if bool(args.cfg) != bool(args.output):
        args.parser.error("--cfg and -o go together: the cfg to take and the file to write")
    k = args.num_of_clusters
    cfg = masks = None
    if args.cfg:  # before the work: a cfg whose heads cannot take k anchors fails fast
        from .cfgfiles import resolve_cfg

        cfg = resolve_cfg(args.cfg)
        masks = head_masks(cfg, k)
    print(f"Recalculating anchors, num_of_clusters={k}, width={args.width}, height={args.height}")
    boxes, counts, images = training_boxes(args.data, args.width, args.height,
                                           lambda m: print(f"warning: {m}", file=sys.stderr))
    print(f"read labels from {images} images")
    print(f"loaded image: {images} box: {len(boxes)}")
    print("All loaded.\nCalculating k-means++ ...")
    r = calc_anchors(boxes, k, args.seed, args.restarts)
    print(f"iterations={r.rounds}" + (f" (best of {args.restarts} runs: seed {r.seed})" if args.restarts > 1 else ""))
    # Darknet's lines (hank-ai's calc_anchors), and its two files in the working folder
    counters, anchors = ", ".join(str(c) for c in counts), format_anchors(r.anchors, args.width)
    print(f"counters_per_class={counters}")
    print(f"avg IoU={100 * r.avg_iou:.6g}%")
    print("Saving anchors to the file: anchors.txt")
    print(f"anchors={anchors}")
    from ..outputs.files import write_text

    write_text("counters_per_class.txt", f"counters_per_class={counters}")
    write_text("anchors.txt", anchors)
    if cfg:
        from .cfg_edit import CfgEditor, set_anchors, set_net_options

        ed = CfgEditor.from_file(cfg)
        set_anchors(ed, [(float(w), float(h)) for w, h in r.anchors], masks)
        set_net_options(ed, {"width": args.width, "height": args.height})
        ed.write(args.output)
        print(f"wrote {args.output}: {cfg} with these lines changed:")
        for change in ed.changes:
            print(f"  {change}")
    return 0
