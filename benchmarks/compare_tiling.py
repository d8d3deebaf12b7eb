"""Tiled inference on large synth images of small shapes (data/synth_large.py): recall at IoU 0.5,
duplicates, false detections and time per megapixel, for the whole image alone, for our tiling
(Network.detect_tiled, `--tiles auto`: every tile and the whole image in one batch) and for SAHI's
sliced prediction (benchmarks/sahi_peer.py: the same model, slices of the network's input size with
the same overlap, its standard whole-image pass and its default GREEDYNMM/IOS 0.5 merging), run
slice by slice as SAHI does by default and with all slices in one batch. Prints a Markdown table.

    python benchmarks/compare_tiling.py [--size 3840x2160] [--radius 11,13] [--spacing 120] [--seeds 0 1 2]

How detections are judged against the shapes' boxes (class-agnostic, as src-test/test_tiles.py):
recall: the share of shapes with a detection at IoU >= 0.5. A detection lies on the shape that
holds most of it, if that shape holds at least half its area; a shape with k detections lying on
it has k - 1 duplicates (an object seen twice: by two tiles, as a piece cut by a tile border, or
as two classes by the detector's per-class NMS). "across borders": the duplicates on the shapes that
a border of the method's own tiles cuts, as a share of those shapes; "all": every duplicate, as a
share of the detections lying on shapes. A detection lying on no shape is false.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Dict, List

import numpy as np

from darknet_py.data.synth import parse_size
from darknet_py.data.synth_large import large_image
from darknet_py.evaluation.mot import box_iou
from darknet_py.model_files.demo import demo_network


def cut_by(boxes: np.ndarray, tiles) -> np.ndarray:
    """Which (left, top, width, height) boxes an inner border of the tiles (x0, y0, x1, y1) cuts."""
    cut = np.zeros(len(boxes), bool)
    if len(tiles) < 2:
        return cut
    w, h = max(t[2] for t in tiles), max(t[3] for t in tiles)
    xs = sorted({v for t in tiles for v in (t[0], t[2])} - {0, w})
    ys = sorted({v for t in tiles for v in (t[1], t[3])} - {0, h})
    for x in xs:
        cut |= (boxes[:, 0] < x) & (x < boxes[:, 0] + boxes[:, 2])
    for y in ys:
        cut |= (boxes[:, 1] < y) & (y < boxes[:, 1] + boxes[:, 3])
    return cut


def judge(dets, boxes: np.ndarray, cut: np.ndarray) -> Dict[str, float]:
    """recall, duplicates (counts: all, on shapes `cut` marks), false detections, detections."""
    if not dets:
        return {"recall": 0.0, "duplicate_count": 0, "border_duplicates": 0, "false": 0, "detections": 0}
    d = np.array([x.box for x in dets], float)
    recall = float((box_iou(boxes, d).max(axis=1) >= 0.5).mean())
    ix = np.clip(np.minimum(d[:, None, 0] + d[:, None, 2], boxes[None, :, 0] + boxes[None, :, 2])
                 - np.maximum(d[:, None, 0], boxes[None, :, 0]), 0, None)
    iy = np.clip(np.minimum(d[:, None, 1] + d[:, None, 3], boxes[None, :, 1] + boxes[None, :, 3])
                 - np.maximum(d[:, None, 1], boxes[None, :, 1]), 0, None)
    share = ix * iy / np.maximum(d[:, 2:3] * d[:, 3:4], 1e-9)  # of each detection, on each shape
    on = share.max(axis=1) >= 0.5
    counts = np.bincount(share.argmax(axis=1)[on], minlength=len(boxes))
    extra = np.clip(counts - 1, 0, None)
    return {"recall": recall, "duplicate_count": int(extra.sum()), "border_duplicates": int(extra[cut].sum()),
            "false": int((~on).sum()), "detections": len(dets)}


def methods(net, overlap: float) -> Dict[str, tuple]:
    """name -> (run(image) -> detections, tiles(width, height) -> the tiles it cuts)."""
    from darknet_py.tiling import tile_grid

    out: Dict[str, tuple] = {
        "whole image (untiled)": (lambda img: net.detect(img), lambda w, h: [(0, 0, w, h)]),
        "darknet_py --tiles auto (one batch)": (lambda img: net.detect_tiled(img, "auto", overlap=overlap),
                                                lambda w, h: tile_grid(w, h, net.input_size, "auto", overlap)),
    }
    try:
        from sahi.predict import get_sliced_prediction

        from sahi_peer import DarknetSahiModel
    except ImportError as e:
        print(f"SAHI is not installed ({e}): pip install sahi", file=sys.stderr)
        return out
    from darknet_py.network import Detection

    model = DarknetSahiModel(net)
    w, h = net.input_size

    def sahi(batch: int):
        def run(img):
            r = get_sliced_prediction(img, model, slice_height=h, slice_width=w, overlap_height_ratio=overlap,
                                      overlap_width_ratio=overlap, verbose=0, batch_size=batch)
            return [Detection(p.category.id, p.category.name, p.score.value, p.bbox.minx, p.bbox.miny,
                              p.bbox.maxx - p.bbox.minx, p.bbox.maxy - p.bbox.miny) for p in r.object_prediction_list]
        return run
    import sahi as sahi_module
    from sahi.slicing import get_slice_bboxes

    def slices(iw, ih):
        return get_slice_bboxes(ih, iw, h, w, False, overlap, overlap)

    out[f"SAHI {sahi_module.__version__} get_sliced_prediction (slice by slice)"] = (sahi(1), slices)
    out[f"SAHI {sahi_module.__version__} get_sliced_prediction (batch_size: all slices)"] = (sahi(100000), slices)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=parse_size, default=(3840, 2160))
    ap.add_argument("--radius", default="11,13", help="the shapes' circumradius range, pixels (11,13: about 24 px across)")
    ap.add_argument("--spacing", type=int, default=120, help="pixels between neighbouring shapes' centres")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--overlap", type=float, default=0.2)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per image (the median is kept)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    radius = tuple(float(v) for v in args.radius.split(","))
    net = demo_network(args.device)
    runs = methods(net, args.overlap)
    rows: Dict[str, List[Dict[str, float]]] = {k: [] for k in runs}
    sizes = []
    for seed in args.seeds:
        img, boxes, _ = large_image(seed, args.size, radius, args.spacing)
        sizes.append(float(np.median(np.maximum(boxes[:, 2], boxes[:, 3]))))
        for name, (run, tiles) in runs.items():
            run(img)  # warm-up: buffers sized for this batch
            times, dets = [], None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                dets = run(img)
                times.append(time.perf_counter() - t0)
            cut = cut_by(boxes, tiles(img.shape[1], img.shape[0]))
            r = judge(dets, boxes, cut)
            r.update(s=statistics.median(times), shapes=len(boxes), cut=int(cut.sum()))
            rows[name].append(r)
    mp = args.size[0] * args.size[1] / 1e6
    print(f"{len(args.seeds)} images {args.size[0]}x{args.size[1]} ({mp:.1f} MP), {rows[next(iter(rows))][0]['shapes']} "
          f"shapes each (median size {statistics.median(sizes):.0f} px), demo model on {net.device}, "
          f"overlap {args.overlap}; sums over the images, time: the median of {args.repeats} runs per image")
    print("| method | recall (IoU 0.5) | duplicates across borders | all duplicates | false detections | detections "
          "| s per image | s per megapixel |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, rs in rows.items():
        shapes = sum(r["shapes"] for r in rs)
        found = sum(r["recall"] * r["shapes"] for r in rs) / shapes
        on = sum(r["detections"] - r["false"] for r in rs)
        dup, border, cut = (sum(r[k] for r in rs) for k in ("duplicate_count", "border_duplicates", "cut"))
        s = statistics.median([r["s"] for r in rs])
        across = f"{border / cut * 100:.2f} % ({border} of {cut} shapes)" if cut else "-"
        print(f"| {name} | {found:.3f} | {across} | {dup / max(on, 1) * 100:.2f} % ({dup}) | "
              f"{sum(r['false'] for r in rs)} | {sum(r['detections'] for r in rs)} | {s:.2f} | {s / mp:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
