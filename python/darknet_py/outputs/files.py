"""Every file the commands write goes through here, so that none is ever seen half-written.

A file is written under a temporary name in its own folder (a dot name ending in .tmp, which
listings and globs skip) and renamed over the target with os.replace, which is atomic: a reader,
a crash or a kill sees the previous complete file or the new complete one, never part of one.
Small files (JSON, lists, labels, names) are flushed to disk before the rename; bulk files
(synth's thousands of images) are not, since a process kill cannot half-write them either way
and fsync per image would cost more than the drawing. Videos, which OpenCV writes by name over
minutes, get a temporary name with the real extension (OpenCV picks the container by it); see
TempVideo. A failure raises OutputError naming the file, and removes the temporary file.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Dict, Optional

import numpy as np

from ..exit_codes import OutputError

TMP_SUFFIX = ".tmp"  # the same naming as checkpoint.atomic_write (training's .weights and chart)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_beside(path: str, suffix: str = TMP_SUFFIX) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=suffix, dir=folder)
    except OSError as e:
        raise OutputError(f"{path}: cannot write here ({e.strerror})") from None
    os.close(fd)
    return tmp


def _publish(tmp: str, path: str) -> None:
    """Makes the finished temporary file visible under `path` (mkstemp makes it private: the
    result gets the permissions an ordinary file would)."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def write_bytes(path: str, data: bytes, *, sync: bool = True) -> str:
    """Writes `data` (may be empty) to `path` atomically; `sync` flushes it to disk first."""
    path = os.fspath(path)
    tmp = _temp_beside(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        _publish(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise OutputError(f"{path}: cannot write ({e.strerror or e})") from None
    except BaseException:  # KeyboardInterrupt included: never leave the temporary file behind
        _discard(tmp)
        raise
    return path


def write_text(path: str, text: str, *, sync: bool = True) -> str:
    """Writes UTF-8 text with \\n line ends (as Darknet's files have) atomically."""
    return write_bytes(path, text.encode("utf-8"), sync=sync)


def write_json(path: str, document: Dict[str, Any]) -> None:
    """Writes the JSON document atomically (a partial file never replaces a good one), with one
    line per entry of "results" so that a video's thousands of frames stay greppable."""
    head = {k: v for k, v in document.items() if k != "results"}
    lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()]
    results = ",\n".join("  " + json.dumps(r) for r in document.get("results", []))
    lines.append(f' "results": [\n{results}\n ]' if results else ' "results": []')
    write_text(path, "{\n" + ",\n".join(lines) + "\n}\n")


# Formats that hold one channel: a colour image (annotations are drawn in colour) is written in grey.
GREY_ONLY_EXTS = (".pgm", ".pbm")
_said_grey = False


def encode_image(path: str, image: np.ndarray, params: Optional[list] = None) -> bytes:
    """`image` (BGR uint8) encoded in the format `path`'s extension names (.jpg when it has none).
    A .pgm or .pbm holds one channel: a colour image goes in as grey, said once per process."""
    import cv2

    global _said_grey
    ext = os.path.splitext(path)[1] or ".jpg"
    if ext.lower() in GREY_ONLY_EXTS and image.ndim == 3 and image.shape[2] != 1:
        if not _said_grey:
            _said_grey = True
            print(f"note: {ext} holds one channel: annotated images are written in grey ({path}); "
                  f"colour boxes need a colour format such as .ppm or .png", file=sys.stderr)
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2GRAY if image.shape[2] == 4 else cv2.COLOR_BGR2GRAY)
    ok, buf = cv2.imencode(ext, image, params or [])
    if not ok:
        raise OutputError(f"{path}: OpenCV cannot encode an image as {ext}")
    return buf.tobytes()


def write_image(path: str, image: np.ndarray, *, sync: bool = True, params: Optional[list] = None) -> str:
    """Writes a BGR uint8 image atomically, in the format of `path`'s extension. Works with any
    path encoding (imencode + a Python file, not cv2.imwrite)."""
    return write_bytes(path, encode_image(path, image, params), sync=sync)


class TempVideo:
    """The temporary name a video is written under, and its publication. `path` is the output;
    `tmp` sits beside it and ends with the same extension. `commit()` renames tmp to path;
    `discard()` removes tmp (both idempotent)."""

    def __init__(self, path: str) -> None:
        self.path = os.fspath(path)
        ext = os.path.splitext(self.path)[1]
        self.tmp = _temp_beside(self.path, TMP_SUFFIX + ext)
        self._done = False

    def commit(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            _publish(self.tmp, self.path)
        except OSError as e:
            _discard(self.tmp)
            raise OutputError(f"{self.path}: cannot write ({e.strerror or e})") from None

    def discard(self) -> None:
        if not self._done:
            self._done = True
            _discard(self.tmp)
