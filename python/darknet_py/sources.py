"""What `detect SOURCE` means: one image, a folder of images, a glob, or a video file."""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import List

import cv2
import numpy as np

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".jp2", ".pbm", ".pgm", ".ppm")
VIDEO_EXTS = (".mov", ".mp4", ".avi", ".mkv")


def is_video(path: str) -> bool:
    return path.lower().endswith(VIDEO_EXTS)


def is_image(path: str) -> bool:
    return path.lower().endswith(IMAGE_EXTS)


@dataclass
class Source:
    """The input files of one run, in order, and the folder their output names are relative to."""

    spec: str          # what the user typed
    kind: str          # "image", "folder", "glob" or "video"
    files: List[str]
    root: str          # outputs keep each file's path relative to this folder

    @property
    def videos(self) -> List[str]:
        return [f for f in self.files if is_video(f)]

    @property
    def images(self) -> List[str]:
        return [f for f in self.files if not is_video(f)]


def resolve_source(spec: str) -> Source:
    """Expands SOURCE into files. Raises FileNotFoundError when nothing matches."""
    if os.path.isdir(spec):
        files = sorted(os.path.join(spec, n) for n in os.listdir(spec)
                       if (is_image(n) or is_video(n)) and os.path.isfile(os.path.join(spec, n)))
        if not files:
            raise FileNotFoundError(f"no images or videos in folder: {spec} "
                                    f"(looked for {', '.join(IMAGE_EXTS + VIDEO_EXTS)})")
        return Source(spec, "folder", files, spec)
    if os.path.isfile(spec):
        return Source(spec, "video" if is_video(spec) else "image", [spec], os.path.dirname(spec))
    if glob.has_magic(spec):
        files = sorted(f for f in glob.glob(spec, recursive=True)
                       if os.path.isfile(f) and (is_image(f) or is_video(f)))
        if not files:
            raise FileNotFoundError(f"no images or videos match: {spec}")
        # outputs mirror the matched files' layout below their common folder, so a/x.jpg and
        # b/x.jpg do not overwrite each other
        root = os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])
        return Source(spec, "glob", files, root)
    raise FileNotFoundError(f"source not found: {spec}")


def output_path(src: str, source: Source, out_dir: str) -> str:
    """Where the annotated copy of `src` goes: its path relative to the source root, under out_dir."""
    rel = os.path.relpath(os.path.abspath(src), os.path.abspath(source.root or "."))
    if rel.startswith(".."):
        rel = os.path.basename(src)
    return os.path.join(out_dir, rel)


def read_image(path: str) -> np.ndarray:
    """BGR uint8 image. imdecode(fromfile) instead of imread: works with any path encoding and
    fails with a message instead of printing OpenCV warnings. Raises ValueError when unreadable."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise FileNotFoundError(f"cannot read image: {path} ({e.strerror})") from None
    image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    if image is None:
        raise ValueError(f"cannot read image: {path} (not an image, or corrupt)")
    return image


def write_image(path: str, image: np.ndarray) -> None:
    """Writes `image` in the format its extension names (imencode + tofile, as read_image)."""
    ext = os.path.splitext(path)[1] or ".jpg"
    ok, buf = cv2.imencode(ext, image)
    if not ok:
        raise ValueError(f"cannot encode image as {ext}: {path}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    buf.tofile(path)
