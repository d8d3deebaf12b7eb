"""What `detect SOURCE` means: one image, a folder of images, a glob, a video file, a list file
(`list.txt`, one path a line, as Darknet reads `< list.txt`), `-` (the same list on stdin), or a live
source: a camera index (`0`) or a stream URL (see live.py)."""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass, field
from typing import List, Optional, TextIO, Tuple, Union

import cv2
import numpy as np

from ..outputs import files as outputs

IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".jp2", ".pbm", ".pgm", ".ppm")
VIDEO_EXTS = (".mov", ".mp4", ".avi", ".mkv", ".m4v", ".webm", ".mpg", ".mpeg", ".ts", ".wmv", ".gif")
LIST_EXT = ".txt"  # a list of paths, as Darknet's train.txt / valid.txt


def is_video(path: str) -> bool:
    return path.lower().endswith(VIDEO_EXTS)


def is_image(path: str) -> bool:
    return path.lower().endswith(IMAGE_EXTS)


@dataclass
class Source:
    """The input files of one run, in order, and the folder their output names are relative to."""

    spec: str          # what the user typed
    kind: str          # "image", "folder", "glob", "video", "list", "camera" or "stream"
    files: List[str]
    root: str          # outputs keep each file's path relative to this folder
    ignored: List[str] = field(default_factory=list)  # files a glob matched that are neither images nor videos
    missing: List[str] = field(default_factory=list)  # "list.txt:3: x.jpg: not found" for a list's absent entries
    live: Optional[Union[int, str]] = None  # a camera index or a stream URL (kind "camera"/"stream")

    @property
    def videos(self) -> List[str]:
        return [f for f in self.files if is_video(f)]

    @property
    def images(self) -> List[str]:
        return [f for f in self.files if not is_video(f)]


KNOWN = ", ".join(IMAGE_EXTS + VIDEO_EXTS)


def _media_or_ignored(paths: List[str]) -> Tuple[List[str], List[str]]:
    """(images and videos, other files), both sorted; folders are left out of both."""
    files = sorted(p for p in paths if os.path.isfile(p))
    return [f for f in files if is_image(f) or is_video(f)], [f for f in files if not (is_image(f) or is_video(f))]


def _glob_root(files: List[str]) -> str:
    # outputs mirror the files' layout below their common folder, so a/x.jpg and b/x.jpg do not
    # overwrite each other
    return os.path.commonpath([os.path.dirname(os.path.abspath(f)) for f in files])


def read_list(lines: List[str], name: str) -> Tuple[List[str], List[str]]:
    """(paths, missing) from the lines of a list (blank lines ignored; relative paths are taken
    from the working directory, as Darknet takes them). `missing` names each absent entry with
    the list's `name` and line number."""
    files, missing = [], []
    for number, line in enumerate(lines, 1):
        path = line.strip()
        if not path:
            continue
        if os.path.isfile(path):
            files.append(path)
        else:
            missing.append(f"{name}:{number}: {path}: not found")
    return files, missing


def _list_source(spec: str, lines: List[str], name: str) -> Source:
    files, missing = read_list(lines, name)
    if not files:
        why = f"none of its {len(missing)} entries exist (first: {missing[0]})" if missing else "it lists no paths"
        raise FileNotFoundError(f"{name}: {why}")
    return Source(spec, "list", files, _glob_root(files), missing=missing)


def resolve_source(spec: str, stdin: Optional[TextIO] = None) -> Source:
    """Expands SOURCE into files. Raises FileNotFoundError when nothing matches, PermissionError
    naming the folder when it cannot be listed. Files of other types that a glob matched are kept
    in `ignored`, for the caller to report: the pattern asked for them. A folder's other files
    (Darknet's label .txt files beside the images, notes) are passed over quietly. `-` reads the
    list from `stdin` (default sys.stdin); a camera index or stream URL is returned unopened."""
    from .live import is_camera, is_stream_url

    if spec == "-":
        return _list_source(spec, (stdin or sys.stdin).read().splitlines(), "stdin")
    if is_camera(spec) and not os.path.exists(spec):
        return Source(spec, "camera", [], ".", live=int(spec))
    if is_stream_url(spec):
        return Source(spec, "stream", [], ".", live=spec)
    if os.path.isfile(spec) and spec.lower().endswith(LIST_EXT):
        try:
            with open(spec, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise FileNotFoundError(f"{spec}: cannot read the list ({e.strerror})") from None
        return _list_source(spec, lines, spec)
    if os.path.isdir(spec):
        try:
            names = os.listdir(spec)
        except OSError as e:
            raise PermissionError(f"{spec}: cannot list the folder ({e.strerror})") from None
        files, _ = _media_or_ignored([os.path.join(spec, n) for n in names])
        if not files:
            raise FileNotFoundError(f"{spec}: no images or videos in this folder (looked for {KNOWN})")
        return Source(spec, "folder", files, spec)
    if os.path.isfile(spec):
        return Source(spec, "video" if is_video(spec) else "image", [spec], os.path.dirname(spec))
    if glob.has_magic(spec):
        files, ignored = _media_or_ignored(glob.glob(spec, recursive=True))
        if not files:
            raise FileNotFoundError(f"{spec}: no images or videos match (looked for {KNOWN})")
        return Source(spec, "glob", files, _glob_root(files), ignored)
    if os.path.lexists(spec):  # e.g. a broken symbolic link, a socket
        raise FileNotFoundError(f"{spec}: not a readable file or folder")
    raise FileNotFoundError(f"source not found: {spec}")


def output_path(src: str, source: Source, out_dir: str) -> str:
    """Where the annotated copy of `src` goes: its path relative to the source root, under out_dir."""
    rel = os.path.relpath(os.path.abspath(src), os.path.abspath(source.root or "."))
    if rel.startswith(".."):
        rel = os.path.basename(src)
    return os.path.join(out_dir, rel)


def jpeg_truncated(data: np.ndarray) -> bool:
    """Whether JPEG bytes stop before their end-of-image marker. Some OpenCV builds decode such a
    file into an image whose lower part is grey, with only a libjpeg warning; we refuse it. The
    marker must follow the last start-of-scan (the entropy-coded data cannot contain it), so an
    embedded thumbnail's marker or a vendor trailer after the image do not mislead the check."""
    raw = data.tobytes()
    if not raw.startswith(b"\xff\xd8"):
        return False  # not a JPEG, whatever its name: the decoder judges it
    sos = raw.rfind(b"\xff\xda")
    return sos < 0 or raw.find(b"\xff\xd9", sos) < 0


def read_image(path: str) -> np.ndarray:
    """BGR uint8 image. imdecode(fromfile) instead of imread: works with any path encoding and
    fails with a message instead of printing OpenCV warnings. Raises ValueError naming the file
    and what is wrong when it is empty, truncated or not an image, OSError when unreadable."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise FileNotFoundError(f"{path}: cannot read the image ({e.strerror})") from None
    if not data.size:
        raise ValueError(f"{path}: empty file (0 bytes)")
    if jpeg_truncated(data):
        raise ValueError(f"{path}: truncated JPEG (the file ends before the image does)")
    image = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError(f"{path}: cannot decode the image (not an image, or corrupt)")
    return image


def write_image(path: str, image: np.ndarray) -> None:
    """Writes `image` atomically in the format its extension names (see outputs.write_image)."""
    outputs.write_image(path, image, sync=False)
