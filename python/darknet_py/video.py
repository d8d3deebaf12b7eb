"""Video I/O with OpenCV, decoding and encoding in background threads.

The network's forward pass releases the GIL, and so do OpenCV's read/write, so decoding frame
i+1 and encoding frame i-1 overlap with detecting frame i. The queues are bounded, so memory
stays flat however long the video is.
"""
from __future__ import annotations

import math
import os
import queue
import threading
from typing import Any, Callable, Iterator, Optional, Tuple

import cv2
import numpy as np

# mp4v (MPEG-4 part 2) is what every opencv-python wheel can encode into .mp4/.mov/.mkv; .avi gets
# MJPG, which OpenCV encodes itself even without FFmpeg (Darknet's demo writes MJPG too).
_FOURCC = {".mp4": "mp4v", ".mov": "mp4v", ".mkv": "mp4v", ".avi": "MJPG"}
_END = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def fourcc_for(path: str) -> str:
    """The codec used to write a video at `path`, chosen by its extension."""
    return _FOURCC.get(os.path.splitext(path)[1].lower(), "mp4v")


def _put(q: "queue.Queue[Any]", item: Any, stop: threading.Event) -> bool:
    """Puts into a bounded queue, giving up when `stop` is set (the consumer went away)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


class FrameReader:
    """Iterates (index, frame, prepared) over a video file; `prepare(frame)` (e.g. the network's
    preprocess) also runs in the decoding thread. Use as a context manager, or call close()."""

    def __init__(self, path: str, prepare: Optional[Callable[[np.ndarray], Any]] = None,
                 queue_size: int = 8) -> None:
        self.path = path
        self._cap = cv2.VideoCapture(path)
        if not self._cap.isOpened():
            raise ValueError(f"cannot open video: {path} (unsupported or corrupt file)")
        fps = self._cap.get(cv2.CAP_PROP_FPS)
        # some containers report 0 or nonsense; 25 is what players assume
        self.fps = float(fps) if math.isfinite(fps) and 0 < fps <= 1000 else 25.0
        n = int(self._cap.get(cv2.CAP_PROP_FRAME_COUNT))
        self.frame_count: Optional[int] = n if n > 0 else None  # from the header: an estimate
        self.size = (int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        self._prepare = prepare
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=max(1, queue_size))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._decode, name="darknet_py-decode", daemon=True)
        self._thread.start()

    def _decode(self) -> None:
        try:
            index = 0
            while not self._stop.is_set():
                ok, frame = self._cap.read()
                if not ok:
                    break
                prepared = self._prepare(frame) if self._prepare is not None else None
                if not _put(self._queue, (index, frame, prepared), self._stop):
                    break
                index += 1
        except BaseException as e:  # handed to the consumer, who raises it
            _put(self._queue, _Failure(e), self._stop)
        finally:
            self._cap.release()
            _put(self._queue, _END, self._stop)

    def __iter__(self) -> Iterator[Tuple[int, np.ndarray, Any]]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> "FrameReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FrameWriter:
    """Writes BGR frames to a video file from a background thread. The file is opened on the
    first frame (its size is the frame's: rotated phone videos decode with swapped sides) and
    finalized by close(), which also runs on errors and Ctrl-C when used as a context manager."""

    def __init__(self, path: str, fps: float, queue_size: int = 8) -> None:
        self.path, self.fps = path, fps
        self.size: Optional[Tuple[int, int]] = None
        self.frames = 0
        self._writer: Optional[cv2.VideoWriter] = None
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=max(1, queue_size))
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None

    def _open(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        writer = cv2.VideoWriter(self.path, cv2.VideoWriter_fourcc(*fourcc_for(self.path)), self.fps, (w, h))
        if not writer.isOpened():
            raise ValueError(f"cannot write video: {self.path} (codec {fourcc_for(self.path)} unavailable "
                             f"or folder not writable)")
        self._writer, self.size = writer, (w, h)
        self._thread = threading.Thread(target=self._encode, name="darknet_py-encode", daemon=True)
        self._thread.start()

    def _encode(self) -> None:
        assert self._writer is not None
        try:
            while True:
                frame = self._queue.get()
                if frame is _END:
                    return
                self._writer.write(frame)
        except BaseException as e:
            self._error = e
            self._stop.set()

    def write(self, frame: np.ndarray) -> None:
        if self._error is not None:
            raise self._error
        if self._writer is None:
            self._open(frame)
        if (frame.shape[1], frame.shape[0]) != self.size:  # a stream that changes size mid-way
            frame = cv2.resize(frame, self.size)
        _put(self._queue, frame, self._stop)
        self.frames += 1

    def close(self) -> None:
        """Writes the queued frames and finalizes the file (idempotent)."""
        if self._thread is not None:
            _put(self._queue, _END, self._stop)
            self._thread.join()
            self._thread = None
        if self._writer is not None:
            self._writer.release()
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> "FrameWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
