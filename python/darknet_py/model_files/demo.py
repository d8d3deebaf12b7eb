"""The bundled demo model: a small detector of circles, squares, triangles and stars.

It ships in darknet_py/models/demo/ so that `darknet_py detect` runs a real detection on a fresh
install: shapes-demo.cfg (a reduced yolov4-tiny: a quarter of the filters, 256x256 input, two
heads), shapes-demo.weights (trained with this engine on `darknet_py synth` images, see the
README for the command and its mAP), shapes.names, a sample image and a short sample video.
The samples were made by make_sample_image / make_sample_video below with their default seeds.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

DEMO_DIR = Path(__file__).resolve().parents[1] / "models" / "demo"  # darknet_py/models/demo
FILES = {"cfg": "shapes-demo.cfg", "weights": "shapes-demo.weights", "names": "shapes.names",
         "image": "sample.jpg", "video": "sample.mp4"}
CLASSES = ("circle", "square", "triangle", "star")


def demo_files() -> Dict[str, str]:
    """Paths of the demo model's files (cfg, weights, names, image, video). Raises FileNotFoundError
    naming what is missing (an incomplete installation)."""
    paths = {k: str(DEMO_DIR / v) for k, v in FILES.items()}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"the bundled demo model is incomplete, missing: {', '.join(missing)} "
                                "(reinstall the package: pip install darknet-engine, or pip install . in a checkout; or pass --cfg and --weights)")
    return paths


def demo_network(device: Optional[str] = None):
    """The demo model as a darknet_py.Network with its class names."""
    from ..network import Network

    f = demo_files()
    return Network(f["cfg"], f["weights"], f["names"], device)


def make_sample_image(path: str, seed: int = 2024, size: Tuple[int, int] = (416, 416)) -> str:
    """A synth image of the four demo shapes (a JPEG), as `darknet_py synth` draws them."""
    import cv2

    from ..data.synth import render

    img, _ = render(np.random.default_rng([seed, 0]), size[0], size[1], len(CLASSES))
    if not cv2.imwrite(path, img, [cv2.IMWRITE_JPEG_QUALITY, 90]):
        raise OSError(f"cannot write {path}")
    return path


def render_video_frames(seed: int = 2024, size: Tuple[int, int] = (320, 240), frames: int = 60,
                        shapes: int = 5):
    """Frames (BGR uint8) of synth-like shapes drifting and turning over a textured background,
    bouncing off the borders; one of each demo class, then random ones."""
    import cv2

    from ..data.synth import _colours, background, shape_outline

    rng = np.random.default_rng([seed, 1])
    w, h = size
    bg = background(rng, w, h)
    scale = min(w, h)
    kinds = [i % len(CLASSES) for i in range(shapes)]
    r = rng.uniform(0.07, 0.14, shapes) * scale
    pos = np.stack([rng.uniform(r, w - r), rng.uniform(r, h - r)], axis=1)
    vel = rng.uniform(-1, 1, (shapes, 2)) * scale * 0.02
    angle = rng.uniform(0, 2 * np.pi, shapes)
    spin = rng.uniform(-0.08, 0.08, shapes)
    colours = _colours(rng, shapes, vivid=True)
    for _ in range(frames):
        img = bg.copy()
        for k in range(shapes):
            outer, _hole = shape_outline(CLASSES[kinds[k]], float(r[k]), float(angle[k]))
            pts = np.round((outer + pos[k]) * 16).astype(np.int32)
            cv2.fillPoly(img, [pts], colours[k], lineType=cv2.LINE_AA, shift=4)
        yield img
        pos += vel
        angle += spin
        for k in range(shapes):  # bounce
            for d, limit in ((0, w), (1, h)):
                if pos[k, d] < r[k] or pos[k, d] > limit - r[k]:
                    vel[k, d] = -vel[k, d]
                    pos[k, d] = min(max(pos[k, d], r[k]), limit - r[k])


def make_sample_video(path: str, seed: int = 2024, size: Tuple[int, int] = (320, 240), seconds: float = 4.0,
                      fps: float = 15.0) -> str:
    """A short MP4 of moving demo shapes (see render_video_frames)."""
    import cv2

    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, size)
    if not writer.isOpened():
        raise OSError(f"cannot write {path}: OpenCV has no mp4v encoder")
    try:
        for frame in render_video_frames(seed, size, int(round(seconds * fps))):
            writer.write(frame)
    finally:
        writer.release()
    return path


NOTE = ("using the bundled demo model (it detects circles, squares, triangles and stars; "
        "pass --cfg and --weights to use your own)")
