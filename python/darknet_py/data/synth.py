"""`darknet_py synth`: a synthetic detection dataset of coloured shapes, in Darknet's layout.

    DIR/images/000000.jpg ...   JPEG images (OpenCV)
    DIR/images/000000.txt ...   YOLO labels `class cx cy w h` (normalised tight boxes), beside the images
    DIR/shapes.names            class names, one per line
    DIR/train.txt, valid.txt    image lists
    DIR/shapes.data             classes, train, valid, names, backup (DIR/backup/)

Darknet reads it unchanged: current Darknet (AlexeyAB's replace_image_to_label) finds a label by
swapping the image's extension for .txt (it swaps images/ for labels/ only in COCO's
images/train2014/-style folders), so the labels sit beside the images; `labels_folder=True`
(--labels-folder) also writes DIR/labels/ for pjreddie's Darknet, which swaps images/ for labels/.
The paths in shapes.data and the lists are absolute, so Darknet finds them from any working
directory; `relative=True` (--relative) writes them relative to DIR instead, so that the folder
can be moved (darknet_py resolves them against the file's own folder; Darknet only when run from
DIR). Every file is written atomically (outputs/files.py): an interrupted run leaves whole files only.

Each image: a textured background (a smooth colour field, a gradient, lines, blobs, noise), then
1..6 vivid shapes of random class, size, position, rotation and colour, drawn one over another.
A shape may cover at most 40 % of an earlier one (placements that would hide more are retried),
so every drawn shape is labelled with the tight box of its visible pixels; a label is dropped
only if less than half of a shape is visible. Image i depends only on (seed, i): the output is
byte-identical for a seed, whatever the number of worker threads.
"""
from __future__ import annotations

import argparse
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np

from ..commands.argtypes import fraction, positive_int
from ..exit_codes import OutputError
from ..outputs.files import encode_image, write_bytes, write_text

SHAPES = ("circle", "square", "triangle", "star", "hexagon", "cross", "ring", "diamond")
DATA_NAME, NAMES_NAME = "shapes.data", "shapes.names"
MAX_COVER = 0.4  # a new shape may hide at most this fraction of an earlier one's area
MIN_VISIBLE = 0.5  # a shape less visible than this is not labelled


@dataclass
class Shape:
    """One drawn shape: class id, tight box of its visible pixels (x0, y0, x1, y1, exclusive ends),
    colour (B, G, R), visible and full pixel areas."""

    cls: int
    box: Tuple[int, int, int, int]
    colour: Tuple[int, int, int]
    visible: int
    area: int


# ---- geometry -------------------------------------------------------------------------------
def _regular(n: int, r: float, phase: float = 0.0) -> np.ndarray:
    a = phase + np.arange(n) * (2 * np.pi / n)
    return np.stack([r * np.cos(a), r * np.sin(a)], axis=1)


def shape_outline(kind: str, r: float, angle: float) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """(outer polygon, hole polygon or None) of a shape of circumradius r turned by `angle`
    radians, centred on the origin, as float (n, 2) arrays."""
    if kind == "circle":
        pts, hole = _regular(64, r), None
    elif kind == "square":
        pts, hole = _regular(4, r, np.pi / 4), None
    elif kind == "triangle":
        pts, hole = _regular(3, r, -np.pi / 2), None
    elif kind == "star":
        outer, inner = _regular(5, r, -np.pi / 2), _regular(5, 0.42 * r, -np.pi / 2 + np.pi / 5)
        pts, hole = np.stack([outer, inner], axis=1).reshape(-1, 2), None
    elif kind == "hexagon":
        pts, hole = _regular(6, r), None
    elif kind == "cross":
        a, b = r * 0.3, r * 0.95  # arm half-width, arm reach
        pts = np.array([(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b),
                        (-a, a), (-b, a), (-b, -a), (-a, -a)], float)
        hole = None
    elif kind == "ring":
        pts, hole = _regular(64, r), _regular(48, 0.55 * r)
    elif kind == "diamond":  # a rhombus 0.6 as wide as tall: not a turned square
        pts, hole = np.array([(0, -r), (0.6 * r, 0), (0, r), (-0.6 * r, 0)], float), None
    else:
        raise ValueError(f"unknown shape {kind!r} (known: {', '.join(SHAPES)})")
    c, s = np.cos(angle), np.sin(angle)
    rot = np.array([[c, -s], [s, c]])
    return pts @ rot.T, (None if hole is None else hole @ rot.T)


def _shape_mask(kind: str, r: float, angle: float, cx: float, cy: float, width: int, height: int):
    """(ROI (x0, y0, x1, y1), polygons in 4-bit fixed point relative to the ROI, uint8 0/1 mask
    over the ROI) of a shape placed at (cx, cy). Filling the same polygons on the image gives the
    same pixels: cv2.fillPoly fills the area inside an odd number of contours (the ring's hole)."""
    outer, hole = shape_outline(kind, r, angle)
    outer = outer + (cx, cy)
    x0, y0 = (int(v) for v in np.floor(outer.min(axis=0)))
    x1, y1 = (int(v) + 1 for v in np.ceil(outer.max(axis=0)))
    x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, width), min(y1, height)
    polys = [outer] if hole is None else [outer, hole + (cx, cy)]
    polys = [np.round((p - (x0, y0)) * 16).astype(np.int32) for p in polys]
    mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillPoly(mask, polys, 1, lineType=cv2.LINE_8, shift=4)
    return (x0, y0, x1, y1), polys, mask


# ---- colours and background -----------------------------------------------------------------
def _colours(rng, n: int, vivid: bool) -> List[Tuple[int, int, int]]:
    """n random BGR colours: vivid (saturated, for shapes) or muted (greyish, for the background).
    One cvtColor call for all of them: per-colour calls cost more than the drawing."""
    if n <= 0:
        return []
    hsv = np.empty((n, 1, 3), np.uint8)
    hsv[:, 0, 0] = rng.integers(0, 180, n)
    hsv[:, 0, 1] = rng.integers(150, 256, n) if vivid else rng.integers(0, 90, n)
    hsv[:, 0, 2] = rng.integers(120, 256, n) if vivid else rng.integers(40, 231, n)
    return [tuple(c) for c in cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)[:, 0].tolist()]


_NOISE: dict = {}
_NOISE_LOCK = threading.Lock()


def _noise_tiles(size: int = 512):
    """Fixed signed noise (sigma 6) as two uint8 tiles (positive and negative parts), made once
    from a constant seed and repeated to twice the size so that any size x size window at any
    offset is one slice: adding and subtracting them with saturation is much faster than drawing
    fresh noise for each image."""
    with _NOISE_LOCK:
        if size not in _NOISE:
            n = np.rint(np.random.default_rng(20240531).normal(0, 6, (size, size, 3))).clip(-255, 255)
            pos, neg = n.clip(0, None).astype(np.uint8), (-n).clip(0, None).astype(np.uint8)
            _NOISE[size] = (np.tile(pos, (2, 2, 1)), np.tile(neg, (2, 2, 1)))
        return _NOISE[size]


def _add_noise(img: np.ndarray, rng, tile: int = 512) -> None:
    h, w = img.shape[:2]
    pos, neg = _noise_tiles(tile)
    for y in range(0, h, tile):  # tile the image, each window at a random offset
        for x in range(0, w, tile):
            ox, oy = int(rng.integers(tile)), int(rng.integers(tile))
            pw, ph = min(tile, w - x), min(tile, h - y)
            roi = img[y:y + ph, x:x + pw]
            cv2.add(roi, pos[oy:oy + ph, ox:ox + pw], dst=roi)
            cv2.subtract(roi, neg[oy:oy + ph, ox:ox + pw], dst=roi)


def background(rng, width: int, height: int) -> np.ndarray:
    """A textured BGR background: a smooth field of muted colours, blobs and lines."""
    gx, gy = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    n_blobs, n_lines = int(rng.integers(0, 6)), int(rng.integers(0, 12))
    colours = _colours(rng, gx * gy + n_blobs + n_lines, vivid=False)
    field = np.array(colours[:gx * gy], np.uint8).reshape(gy, gx, 3)
    img = cv2.resize(field, (width, height), interpolation=cv2.INTER_CUBIC if rng.random() < 0.5 else cv2.INTER_LINEAR)
    scale = min(width, height)
    for colour in colours[gx * gy:gx * gy + n_blobs]:
        centre = (int(rng.integers(width)), int(rng.integers(height)))
        axes = (int(rng.uniform(0.03, 0.25) * scale), int(rng.uniform(0.03, 0.25) * scale))
        cv2.ellipse(img, centre, axes, float(rng.uniform(0, 180)), 0, 360, colour, -1, cv2.LINE_AA)
    for colour in colours[gx * gy + n_blobs:]:  # lines and strokes, some running off the image
        p0 = (int(rng.integers(-width // 4, width * 5 // 4)), int(rng.integers(-height // 4, height * 5 // 4)))
        p1 = (int(rng.integers(-width // 4, width * 5 // 4)), int(rng.integers(-height // 4, height * 5 // 4)))
        cv2.line(img, p0, p1, colour, int(rng.integers(1, 4)), cv2.LINE_AA)
    if rng.random() < 0.3:
        img = cv2.GaussianBlur(img, (3, 3), 0)
    return img


# ---- one image ------------------------------------------------------------------------------
def render(rng, width: int, height: int, classes: int, max_shapes: int = 6) -> Tuple[np.ndarray, List[Shape]]:
    """One image (BGR uint8) and its labelled shapes, drawn with `rng` (a NumPy Generator)."""
    img = background(rng, width, height)
    owner = np.zeros((height, width), np.int16)  # which shape (1-based) shows at each pixel
    rois: List[Tuple[int, int, int, int]] = []
    visible: List[int] = []
    areas: List[int] = []
    kinds: List[int] = []
    colours: List[Tuple[int, int, int]] = []
    scale = min(width, height)
    wanted = int(rng.integers(1, max_shapes + 1))
    for _ in range(wanted * 4):  # attempts
        if len(kinds) == wanted:
            break
        cls = int(rng.integers(classes))
        r = float(np.exp(rng.uniform(np.log(0.045), np.log(0.2)))) * scale
        angle = float(rng.uniform(0, 2 * np.pi))
        cx, cy = float(rng.uniform(r, width - r)), float(rng.uniform(r, height - r))
        (x0, y0, x1, y1), polys, mask = _shape_mask(SHAPES[cls], r, angle, cx, cy, width, height)
        area = int(np.count_nonzero(mask))
        if area < 16:
            continue
        region = owner[y0:y1, x0:x1]
        sel = mask.view(bool)
        hidden = np.bincount(region[sel], minlength=len(kinds) + 1)[1:]
        if any(visible[i] - hidden[i] < (1 - MAX_COVER) * areas[i] for i in np.nonzero(hidden)[0]):
            continue  # would hide too much of an earlier shape: try elsewhere
        for i in np.nonzero(hidden)[0]:
            visible[i] -= int(hidden[i])
        region[sel] = len(kinds) + 1
        colour = _colours(rng, 1, vivid=True)[0]
        cv2.fillPoly(img[y0:y1, x0:x1], polys, colour, lineType=cv2.LINE_8, shift=4)
        rois.append((x0, y0, x1, y1))
        visible.append(area)
        areas.append(area)
        kinds.append(cls)
        colours.append(colour)
    if rng.random() < 0.8:
        _add_noise(img, rng)
    shapes = []
    for i, (x0, y0, x1, y1) in enumerate(rois):
        if visible[i] < MIN_VISIBLE * areas[i]:
            continue
        ys, xs = np.nonzero(owner[y0:y1, x0:x1] == i + 1)
        box = (x0 + int(xs.min()), y0 + int(ys.min()), x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1)
        shapes.append(Shape(kinds[i], box, colours[i], visible[i], areas[i]))
    return img, shapes


def label_text(shapes: Sequence[Shape], width: int, height: int) -> str:
    lines = []
    for s in shapes:
        x0, y0, x1, y1 = s.box
        lines.append(f"{s.cls} {(x0 + x1) / 2 / width:.6f} {(y0 + y1) / 2 / height:.6f} "
                     f"{(x1 - x0) / width:.6f} {(y1 - y0) / height:.6f}\n")
    return "".join(lines)


# ---- the dataset ----------------------------------------------------------------------------
def generate(directory: str, images: int = 1000, classes: int = 4, size: Tuple[int, int] = (416, 416),
             seed: int = 0, valid_fraction: float = 0.2, *, relative: bool = False,
             labels_folder: bool = False, workers: Optional[int] = None, progress: bool = False,
             jpeg_quality: int = 90) -> str:
    """Writes the dataset into `directory` (created if needed; files of the same names are
    overwritten) and returns the path of its .data file. See the module docstring. valid_fraction
    is in [0, 1]: 0 lists every image for training (and the .data file's valid = the train list),
    1 every image for validation (train.txt is then empty)."""
    if images < 1:
        raise ValueError(f"images must be at least 1, got {images}")
    if not 1 <= classes <= len(SHAPES):
        raise ValueError(f"classes must be 1..{len(SHAPES)} (the shapes: {', '.join(SHAPES)}), got {classes}")
    width, height = size
    if width < 32 or height < 32:
        raise ValueError(f"image size must be at least 32 x 32, got {width} x {height}")
    if not 0 <= valid_fraction <= 1:
        raise ValueError(f"valid_fraction must be in [0, 1], got {valid_fraction}")

    root = os.path.abspath(directory)
    subs = ("images", "backup") + (("labels",) if labels_folder else ())
    for sub in subs:
        try:
            os.makedirs(os.path.join(root, sub), exist_ok=True)
        except OSError as e:
            raise OutputError(f"{os.path.join(root, sub)}: cannot create the folder ({e.strerror})") from None
    digits = max(6, len(str(images - 1)))
    names = [f"{i:0{digits}d}" for i in range(images)]

    def one(i: int) -> None:
        img, shapes = render(np.random.default_rng([seed % 2 ** 64, i]), width, height, classes)
        # the label first: an image is never there without its label (a kill between the two
        # leaves a label without an image, which no list names yet)
        text = label_text(shapes, width, height)
        write_text(os.path.join(root, "images", names[i] + ".txt"), text, sync=False)
        if labels_folder:
            write_text(os.path.join(root, "labels", names[i] + ".txt"), text, sync=False)
        jpg = encode_image(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)])
        write_bytes(os.path.join(root, "images", names[i] + ".jpg"), jpg, sync=False)

    bar = None
    if progress:
        from ..commands.progress import Progress

        bar = Progress(images, "images", "synth")
    n_workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    try:
        if n_workers <= 1:
            for i in range(images):
                one(i)
                if bar:
                    bar.update()
        else:  # OpenCV drawing and encoding release the GIL
            with ThreadPoolExecutor(n_workers) as pool:
                for _ in pool.map(one, range(images), chunksize=16):
                    if bar:
                        bar.update()
    finally:
        if bar:
            bar.close()

    n_valid = int(round(images * valid_fraction))
    if 0 < valid_fraction < 1 and images >= 2:  # a fraction strictly between gets both lists non-empty
        n_valid = min(max(n_valid, 1), images - 1)
    valid = set(np.random.default_rng([seed % 2 ** 64, 0x5EED]).permutation(images)[:n_valid].tolist())
    # the lists and the .data file last: they name only files that are complete
    path_of = (lambda p: p) if relative else (lambda p: os.path.join(root, p))
    def image_path(i: int) -> str:
        return f"images/{names[i]}.jpg" if relative else os.path.join(root, "images", names[i] + ".jpg")

    write_text(os.path.join(root, "train.txt"), "".join(f"{image_path(i)}\n" for i in range(images) if i not in valid))
    write_text(os.path.join(root, "valid.txt"), "".join(f"{image_path(i)}\n" for i in sorted(valid)))
    write_text(os.path.join(root, NAMES_NAME), "".join(f"{SHAPES[c]}\n" for c in range(classes)))
    data_path = os.path.join(root, DATA_NAME)
    where = ("# relative paths are relative to this file's folder (darknet_py), or run Darknet from it\n"
             if relative else "# absolute paths: Darknet reads them from any working directory\n")
    write_text(data_path,
               f"# darknet_py synth: {images} images {width}x{height}, {classes} classes, seed {seed}\n"
               f"{where}"
               f"classes = {classes}\n"
               f"train = {path_of('train.txt')}\n"
               f"valid = {path_of('valid.txt') if n_valid else path_of('train.txt')}\n"
               f"names = {path_of(NAMES_NAME)}\n"
               f"backup = {path_of('backup')}\n")
    return data_path


# ---- command line ---------------------------------------------------------------------------
SYNTH_EXAMPLES = """\
Labels are written beside the images (DIR/images/000000.txt), where current Darknet looks for
them; the paths in shapes.data and the lists are absolute, so `darknet detector train
DIR/shapes.data ...` works from any folder. --relative makes them relative to DIR (DIR can then
be moved; Darknet must run from DIR); --labels-folder also writes DIR/labels/ (pjreddie's Darknet).

examples:
  darknet_py synth shapes/ --images 1000 --classes 4
  darknet_py synth shapes-test/ --images 200 --classes 4 --size 320x320 --seed 7 --valid-fraction 0.5
  darknet_py synth --video clip.mp4 --frames 150 --size 640x480 --objects 8 --seed 0

--video OUT.mp4 writes a video of moving shapes with known identities instead (paths that cross,
one shape passing over another, shapes entering and leaving the frame), its ground truth in the
MOTChallenge format beside it (OUT.gt.txt: frame,id,left,top,width,height,conf,class,visibility;
frames count from 1) and its class names (OUT.names). See docs/video_tracking.md.
"""


def parse_size(text: str) -> Tuple[int, int]:
    """'416x320' -> (416, 320); one number means a square."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        w, h = (int(parts[0]), int(parts[1])) if len(parts) == 2 else (int(parts[0]),) * 2
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WxH (e.g. 416x416), got {text!r}") from None
    if len(parts) > 2 or w < 32 or h < 32:
        raise argparse.ArgumentTypeError(f"expected WxH of at least 32x32, got {text!r}")
    return w, h


def _class_count(text: str) -> int:
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= k <= len(SHAPES):
        raise argparse.ArgumentTypeError(f"must be 1..{len(SHAPES)} ({' '.join(SHAPES)}), got {k}")
    return k


def add_parser(sub, formatter) -> argparse.ArgumentParser:
    """Registers the `synth` subcommand on the CLI's subparsers."""

    p = sub.add_parser("synth", help="generate a synthetic dataset of coloured shapes",
                       description="Write a detection dataset of coloured shapes on textured backgrounds in\n"
                                   "Darknet's layout: DIR/images/*.jpg with their labels *.txt beside them,\n"
                                   "shapes.names, train.txt, valid.txt and shapes.data.",
                       epilog=SYNTH_EXAMPLES, formatter_class=formatter)
    p.add_argument("dir", metavar="DIR", nargs="?", help="output folder (created if needed)")
    p.add_argument("--images", type=positive_int, metavar="N", help="number of images")
    p.add_argument("--classes", type=_class_count, metavar="K",
                   help=f"number of classes, 1..{len(SHAPES)}: {' '.join(SHAPES)} (in this order; "
                        "--video: default 4)")
    p.add_argument("--size", type=parse_size, metavar="WxH",
                   help="image size (default: 416x416; --video: 640x480)")
    p.add_argument("--video", metavar="OUT.mp4",
                   help="write a video of moving shapes with MOTChallenge ground truth instead of a dataset")
    p.add_argument("--frames", type=positive_int, default=150, metavar="N",
                   help="--video: number of frames (default: %(default)s)")
    p.add_argument("--objects", type=positive_int, default=8, metavar="N",
                   help="--video: number of moving shapes over the whole video (default: %(default)s)")
    p.add_argument("--fps", type=positive_int, default=25, metavar="N",
                   help="--video: frames per second (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed: same seed, same bytes (default: %(default)s)")
    p.add_argument("--valid-fraction", type=fraction, default=0.2, metavar="F",
                   help="fraction of the images listed in valid.txt, 0..1 (default: %(default)s)")
    p.add_argument("--relative", action="store_true",
                   help="paths in the lists and the .data file relative to DIR (default: absolute)")
    p.add_argument("--labels-folder", action="store_true",
                   help="also write the labels to DIR/labels/ (pjreddie's Darknet looks there)")
    p.add_argument("--workers", type=positive_int, metavar="N", help="threads (default: min(4, cores))")
    p.set_defaults(func=cmd_synth, parser=p)
    return p


def cmd_synth(args: argparse.Namespace) -> int:
    """The dataset; `synth --video` is synth_video.cmd_synth's (the command line runs that one)."""
    import time

    t0 = time.perf_counter()
    if not args.dir or not args.images or not args.classes:
        args.parser.error("synth needs DIR, --images and --classes (or --video OUT.mp4)")
    args.size = args.size or (416, 416)
    data = generate(args.dir, args.images, args.classes, args.size, args.seed, args.valid_fraction,
                    relative=args.relative, labels_folder=args.labels_folder,
                    workers=args.workers, progress=True)
    seconds = time.perf_counter() - t0
    w, h = args.size
    print(f"{args.images} images {w}x{h}, {args.classes} classes ({', '.join(SHAPES[:args.classes])}), "
          f"{seconds:.1f} s ({args.images / max(seconds, 1e-9):.0f} images/s)")
    print(f"data file: {data}")
    return 0
