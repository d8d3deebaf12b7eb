"""Atomic file writes for training's outputs (.weights, chart.png).

A file is written under a temporary name in the same folder, flushed to disk, then renamed over the
target with os.replace, which is atomic on POSIX and Windows: a reader (or a crash, a kill, a full
disk) sees either the old complete file or the new complete one, never a half-written one. On any
failure the temporary file is removed and the previous file is left as it was.
"""
from __future__ import annotations

import os
import tempfile
from typing import Callable

TMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str, write: Callable[[str], None]) -> str:
    """Calls `write(tmp_path)` to produce the file's content, then renames it to `path`.
    Returns `path`. The temporary file sits beside `path` (a rename across file systems would not
    be atomic) and its name starts with a dot and ends with .tmp, so listings and globs skip it."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=TMP_SUFFIX, dir=folder)
    os.close(fd)
    try:
        write(tmp)
        if not os.path.exists(tmp) or os.path.getsize(tmp) == 0:
            raise OSError(f"writing {path} produced no data")
        with open(tmp, "rb+") as f:  # the data must be on disk before the rename makes it visible
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the result should not be
        os.replace(tmp, path)
    except BaseException:  # KeyboardInterrupt included: never leave the temporary file behind
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def save_weights_atomic(net, path: str) -> str:
    """Writes `net`'s .weights (with its `seen`) to `path` atomically. `net`: a darknet_py._core.Net
    or a darknet_py.Network."""
    raw = getattr(net, "_net", net)
    return atomic_write(path, raw.save_weights)


def save_image_atomic(path: str, image) -> str:
    """Writes a BGR uint8 image with OpenCV atomically; the format follows `path`'s extension."""
    import cv2

    ext = os.path.splitext(path)[1] or ".png"

    def write(tmp: str) -> None:
        ok, buf = cv2.imencode(ext, image)
        if not ok:
            raise OSError(f"OpenCV could not encode {path}")
        with open(tmp, "wb") as f:
            f.write(buf.tobytes())

    return atomic_write(path, write)
