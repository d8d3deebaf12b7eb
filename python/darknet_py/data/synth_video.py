"""`darknet_py synth --video OUT.mp4`: a video of moving synth shapes with known identities, for
testing trackers and counters.

    OUT.mp4          the frames (OpenCV, mp4v; .avi gets MJPG)
    OUT.gt.txt       the ground truth in the MOTChallenge format, one line per visible object per frame:
                     frame,id,left,top,width,height,conf,class,visibility
    OUT.names        the class names, one per line (the demo model's: circle square triangle star)

gt.txt's columns: `frame` counts from 1 (the first frame of the video is frame 1, as MOTChallenge
numbers them); `id` is the object's identity, 1..N, the same in every frame it is seen in; `left,
top, width, height` are the tight box of its visible pixels (as the synth dataset's labels), so a
box never leaves the frame; `conf` is always 1; `class` is the Darknet class id (0-based, the line
of OUT.names); `visibility` is the visible fraction of the whole shape (0..1: less when another
shape covers it or part of it is outside the frame). An object with no visible pixel has no line.

The scene: one textured background (the synth set's, fresh noise in every frame) and N shapes
moving on straight lines at constant speed while they turn, drawn back to front (each object has
its own depth). Object 1 and object 2 cross the middle of the frame in opposite directions halfway
through the video, object 1 passing in front of and over object 2 (an occlusion); object 3 crosses
their path from top to bottom; the others run from one edge to another (entering and leaving the
frame), some already inside at the first frame, some entering later, so paths cross. The video
depends only on (seed, frames, size, objects, classes).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from .synth import SHAPES, _add_noise, _colours, _shape_mask, background, shape_outline

GT_COLUMNS = ("frame", "id", "left", "top", "width", "height", "conf", "class", "visibility")


@dataclass
class Mover:
    """One moving object: identity, class, circumradius, colour, depth (higher is in front), the frame
    it starts at (t0, may be negative: already under way) and its last frame (t1), its centre at t0,
    its velocity in pixels per frame, its angle at t0 and its turn per frame (radians)."""

    id: int
    cls: int
    r: float
    colour: Tuple[int, int, int]
    z: float
    t0: int
    t1: int
    p0: Tuple[float, float]
    vel: Tuple[float, float]
    angle: float
    spin: float

    def centre(self, t: int) -> Tuple[float, float]:
        return (self.p0[0] + self.vel[0] * (t - self.t0), self.p0[1] + self.vel[1] * (t - self.t0))


def _edge_point(rng, edge: int, w: int, h: int, margin: float) -> Tuple[float, float]:
    """A point just outside edge 0 (left), 1 (top), 2 (right) or 3 (bottom)."""
    if edge == 0:
        return (-margin, float(rng.uniform(0.1 * h, 0.9 * h)))
    if edge == 1:
        return (float(rng.uniform(0.1 * w, 0.9 * w)), -margin)
    if edge == 2:
        return (w + margin, float(rng.uniform(0.1 * h, 0.9 * h)))
    return (float(rng.uniform(0.1 * w, 0.9 * w)), h + margin)


def plan(frames: int, size: Tuple[int, int], objects: int, classes: int, seed: int) -> List[Mover]:
    """The objects of the video (see the module docstring)."""
    rng = np.random.default_rng([seed % 2 ** 64, 7])
    w, h = size
    scale = min(w, h)
    speed = 0.008 * scale  # pixels per frame of the slowest; the fastest is 2.5x
    colours = _colours(rng, objects, vivid=True)
    movers: List[Mover] = []
    mid = frames / 2

    def add(cls: int, r: float, start: Tuple[float, float], end: Tuple[float, float], t_mid: Optional[float],
            v: float, z: float) -> None:
        d = float(np.hypot(end[0] - start[0], end[1] - start[1]))
        n = max(1, int(round(d / v)))
        vel = ((end[0] - start[0]) / n, (end[1] - start[1]) / n)
        t0 = int(round(t_mid - n / 2)) if t_mid is not None else int(rng.integers(-n // 2, max(1, frames - n // 3)))
        movers.append(Mover(len(movers) + 1, cls, r, colours[len(movers)], z, t0, t0 + n, start, vel,
                            float(rng.uniform(0, 2 * np.pi)), float(rng.uniform(-0.05, 0.05))))

    for k in range(objects):
        cls = int(rng.integers(classes)) if k >= classes else k % classes
        if k == 0:    # left to right through the middle, in front
            r = 0.1 * scale
            add(cls, r, (-r, h / 2), (w + r, h / 2), mid, 1.6 * speed, 10.0)
        elif k == 1:  # right to left, a little lower, behind object 1
            r = 0.075 * scale
            add(cls, r, (w + r, h / 2 + 0.06 * scale), (-r, h / 2 + 0.06 * scale), mid, 1.6 * speed, 1.0)
        elif k == 2:  # top to bottom across their path, after they have met
            r = 0.08 * scale
            add(cls, r, (w * 0.35, -r), (w * 0.4, h + r), mid + frames / 6, 2.0 * speed, 5.0)
        else:
            r = float(rng.uniform(0.055, 0.09)) * scale
            e0 = int(rng.integers(4))
            e1 = (e0 + int(rng.integers(1, 4))) % 4
            add(cls, r, _edge_point(rng, e0, w, h, r), _edge_point(rng, e1, w, h, r), None,
                float(rng.uniform(1.0, 2.5)) * speed, float(rng.uniform(0, 10)))
    return movers


def _full_area(kind: str, r: float) -> float:
    outer, hole = shape_outline(kind, r, 0.0)
    area = abs(cv2.contourArea(outer.astype(np.float32)))
    return area - (abs(cv2.contourArea(hole.astype(np.float32))) if hole is not None else 0.0)


def render_frames(frames: int = 150, size: Tuple[int, int] = (640, 480), objects: int = 8, classes: int = 4,
                  seed: int = 0) -> Iterator[Tuple[np.ndarray, List[Tuple]]]:
    """(frame, ground-truth rows) for every frame: rows are gt.txt's columns (see the module docstring)."""
    if frames < 1 or objects < 1:
        raise ValueError(f"frames and objects must be at least 1, got {frames} and {objects}")
    if not 1 <= classes <= len(SHAPES):
        raise ValueError(f"classes must be 1..{len(SHAPES)}, got {classes}")
    w, h = size
    if w < 64 or h < 64:
        raise ValueError(f"video size must be at least 64 x 64, got {w} x {h}")
    movers = plan(frames, size, objects, classes, seed)
    bg = background(np.random.default_rng([seed % 2 ** 64, 8]), w, h)
    areas = [_full_area(SHAPES[m.cls], m.r) for m in movers]
    by_depth = sorted(range(len(movers)), key=lambda k: movers[k].z)
    for t in range(frames):
        img = bg.copy()
        owner = np.zeros((h, w), np.int16)
        rois = {}
        for k in by_depth:
            m = movers[k]
            if not m.t0 <= t <= m.t1:
                continue
            cx, cy = m.centre(t)
            angle = m.angle + m.spin * (t - m.t0)
            outer, _ = shape_outline(SHAPES[m.cls], m.r, angle)
            lo, hi = outer.min(axis=0) + (cx, cy), outer.max(axis=0) + (cx, cy)
            if hi[0] < 1 or hi[1] < 1 or lo[0] > w - 1 or lo[1] > h - 1:
                continue  # outside the frame
            (x0, y0, x1, y1), polys, mask = _shape_mask(SHAPES[m.cls], m.r, angle, cx, cy, w, h)
            if x1 <= x0 or y1 <= y0:
                continue
            cv2.fillPoly(img[y0:y1, x0:x1], polys, m.colour, lineType=cv2.LINE_8, shift=4)
            owner[y0:y1, x0:x1][mask.view(bool)] = k + 1
            rois[k] = (x0, y0, x1, y1)
        _add_noise(img, np.random.default_rng([seed % 2 ** 64, 9, t]))
        rows = []
        for k in sorted(rois):
            x0, y0, x1, y1 = rois[k]
            ys, xs = np.nonzero(owner[y0:y1, x0:x1] == k + 1)
            if len(xs) == 0:
                continue
            bx0, by0 = x0 + int(xs.min()), y0 + int(ys.min())
            bx1, by1 = x0 + int(xs.max()) + 1, y0 + int(ys.max()) + 1
            vis = min(1.0, len(xs) / areas[k])
            rows.append((t + 1, movers[k].id, bx0, by0, bx1 - bx0, by1 - by0, 1, movers[k].cls, round(vis, 3)))
        yield img, rows


def gt_line(row: Sequence) -> str:
    return ",".join(str(v) for v in row[:8]) + f",{row[8]:.3f}\n"


def companion_paths(video: str) -> Tuple[str, str]:
    """(gt.txt path, names path) beside a synth video: OUT.gt.txt and OUT.names."""
    stem = os.path.splitext(video)[0]
    return stem + ".gt.txt", stem + ".names"


def write_video(path: str, frames: int = 150, size: Tuple[int, int] = (640, 480), objects: int = 8,
                classes: int = 4, seed: int = 0, fps: float = 25.0) -> Tuple[str, str]:
    """Writes the video, its ground truth and its class names (see the module docstring); returns
    (gt path, names path)."""
    from ..exit_codes import OutputError
    from ..media.video import fourcc_for
    from ..outputs.files import write_text

    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise OutputError(f"{folder}: cannot create the folder ({e.strerror})") from None
    gt_path, names_path = companion_paths(path)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.partial{os.path.splitext(path)[1]}")
    writer = cv2.VideoWriter(tmp, cv2.VideoWriter_fourcc(*fourcc_for(path)), float(fps), tuple(size))
    if not writer.isOpened():
        raise OutputError(f"{path}: OpenCV cannot write this video ({fourcc_for(path)})")
    lines: List[str] = []
    try:
        for img, rows in render_frames(frames, size, objects, classes, seed):
            writer.write(img)
            lines.extend(gt_line(r) for r in rows)
    except BaseException:
        writer.release()
        os.unlink(tmp)
        raise
    writer.release()
    os.replace(tmp, path)
    write_text(gt_path, "".join(lines))
    write_text(names_path, "".join(f"{SHAPES[c]}\n" for c in range(classes)))
    return gt_path, names_path


def read_gt(path: str) -> np.ndarray:
    """A MOTChallenge gt.txt (or a tracker's results in the same layout) as a float (n, 9+) array."""
    rows = [list(map(float, line.split(","))) for line in open(path, encoding="utf-8") if line.strip()]
    return np.array(rows, float).reshape(-1, len(rows[0]) if rows else 9)


def cmd_synth(args) -> int:
    """`darknet_py synth`: --video OUT.mp4 here, a dataset in synth.cmd_synth."""
    import time

    from . import synth

    if not args.video:
        return synth.cmd_synth(args)
    if args.dir or args.images:
        args.parser.error("--video writes one video: give no DIR and no --images")
    t0 = time.perf_counter()
    size, classes = args.size or (640, 480), args.classes or 4
    gt, names = write_video(args.video, args.frames, size, args.objects, classes, args.seed, args.fps)
    print(f"{args.frames} frames {size[0]}x{size[1]}, {args.objects} objects, {classes} classes, "
          f"{time.perf_counter() - t0:.1f} s")
    print(f"video: {args.video}\nground truth: {gt}\nnames: {names}")
    return 0
