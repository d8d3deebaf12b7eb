"""Atomic file writes for training's outputs (.weights, chart.png).

A file is written under a temporary name in the same folder, flushed to disk, then renamed over the
target with os.replace, which is atomic on POSIX and Windows: a reader (or a crash, a kill, a full
disk) sees either the old complete file or the new complete one, never a half-written one. On any
failure the temporary file is removed and the previous file is left as it was. A kill (SIGKILL,
power loss) cannot run that clean-up: the temporary file stays, hidden from globs by its name, and
remove_stale_temporaries() deletes it when training next starts in that folder.
"""
from __future__ import annotations

import glob
import os
import tempfile
from typing import Callable, List

from .phase_hook import phase

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
    name = os.path.basename(path)
    try:
        phase("save", f"write {name}")
        write(tmp)
        if not os.path.exists(tmp) or os.path.getsize(tmp) == 0:
            raise OSError(f"writing {path} produced no data")
        phase("save", f"sync {name}")
        with open(tmp, "rb+") as f:  # the data must be on disk before the rename makes it visible
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the result should not be
        phase("save", f"rename {name}")
        os.replace(tmp, path)
        _fsync_folder(folder)
    except BaseException:  # KeyboardInterrupt included: never leave the temporary file behind
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _fsync_folder(folder: str) -> None:
    """Makes the rename itself durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def temporary_pattern(name_glob: str) -> str:
    """The glob of atomic_write's temporary files for targets matching `name_glob` (a file name)."""
    return "." + name_glob + ".*" + TMP_SUFFIX


def remove_stale_temporaries(folder: str, name_globs: List[str]) -> List[str]:
    """Deletes the temporary files that a killed atomic_write left in `folder` for targets whose
    names match one of `name_globs` (e.g. "yolo_*.weights"). Only call it where no other process
    writes those targets at the same time. Returns the paths removed."""
    removed = []
    for name_glob in name_globs:
        for tmp in glob.glob(os.path.join(glob.escape(folder), temporary_pattern(name_glob))):  # the leading dot matches hidden files
            try:
                os.unlink(tmp)
                removed.append(tmp)
            except FileNotFoundError:
                pass
    return removed


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
