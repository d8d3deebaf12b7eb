"""Live sources: a camera (an index, `0`) or a network stream (rtsp://, rtmp://, http(s)://, ...).

A live source keeps producing frames whether or not we keep up. LiveReader reads it in a
background thread and, by default, hands out only the newest frame: the frames that arrived while
the previous one was being detected are dropped and counted (a live view should show now, not
lag further behind every second). With drop=False every frame is handed out in order (the reader
then waits for us; a network stream is held back by TCP, a camera's driver drops frames itself).

A stream that stops (the server restarts, the network drops) is reopened after a bounded
exponential back-off: `reconnect` attempts, waiting 0.5 s, 1 s, 2 s, ... (at most 8 s) before
each. When every attempt fails the source has ended, and `end_reason` says why.
"""
from __future__ import annotations

import collections
import math
import os
import re
import threading
from typing import Any, Callable, Deque, Iterator, Optional, Tuple, Union
from urllib.parse import urlparse

import cv2
import numpy as np

STREAM_SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "rtp", "srt")
OPEN_TIMEOUT_MS = 10000  # a stream that sends nothing for this long counts as dropped
BUFFERED_FRAMES = 8      # with drop=False: frames read ahead at most
_END = object()


def is_camera(spec: str) -> bool:
    """`0`, `1`, ...: a camera index (Darknet's `-c 0`)."""
    return bool(re.fullmatch(r"\d{1,3}", spec.strip()))


def is_stream_url(spec: str) -> bool:
    return urlparse(spec).scheme.lower() in STREAM_SCHEMES and "://" in spec


def live_name(spec: Union[int, str]) -> str:
    """A file name stem for a live source's outputs: `camera0`, or the last part of the URL's path
    (`http://host/cam/stream.mjpg` -> `stream`), else its host."""
    if isinstance(spec, int) or is_camera(str(spec)):
        return f"camera{int(spec)}"
    url = urlparse(str(spec))
    stem = os.path.splitext(os.path.basename(url.path.rstrip("/")))[0]
    return re.sub(r"[^\w.-]", "_", stem or url.hostname or "stream")


def _quiet_open(spec: Union[int, str]) -> cv2.VideoCapture:
    """Opens a capture with OpenCV's own logging off: a missing camera makes every backend it tries
    (V4L2, FFmpeg, obsensor) print its failure, and our one line says it better."""
    get_level = getattr(cv2.utils.logging, "getLogLevel", None)
    level = get_level() if get_level else None
    if level is not None:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
    try:
        if isinstance(spec, int):
            return cv2.VideoCapture(spec)
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, OPEN_TIMEOUT_MS, cv2.CAP_PROP_READ_TIMEOUT_MSEC, OPEN_TIMEOUT_MS]
        return cv2.VideoCapture(spec, cv2.CAP_FFMPEG, params)
    finally:
        if level is not None:
            cv2.utils.logging.setLogLevel(level)


class LiveReader:
    """Iterates (index, frame, None) over a camera or stream; `index` counts every frame the
    source delivered, so the gaps are the dropped frames. The third item matches FrameReader's
    (index, frame, prepared). Opening fails at once with ValueError naming the source.
    Use as a context manager, or call close(): the capture is released by the reading thread."""

    def __init__(self, spec: Union[int, str], drop: bool = True, reconnect: int = 5, backoff: float = 0.5,
                 max_backoff: float = 8.0, on_message: Optional[Callable[[str], None]] = None) -> None:
        self.spec: Union[int, str] = int(spec) if isinstance(spec, str) and is_camera(spec) else spec
        self.name = f"camera {self.spec}" if isinstance(self.spec, int) else str(self.spec)
        self.drop, self.reconnect = drop, max(0, int(reconnect))
        self.backoff, self.max_backoff = backoff, max_backoff
        self.on_message = on_message or (lambda text: None)
        self.dropped = 0        # frames the source delivered that were replaced by a newer one unseen
        self.reconnects = 0     # successful reopenings
        self.end_reason = ""    # why the source ended ("" while it runs, or after close())
        self._cap = _quiet_open(self.spec)
        if not self._cap.isOpened():
            self._cap.release()
            what = ("no such camera, or it is in use" if isinstance(self.spec, int)
                    else "unreachable, refused, or not a video stream OpenCV's FFmpeg can read")
            raise ValueError(f"{self.name}: cannot open ({what})")
        fps = self._cap.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if math.isfinite(fps) and 0 < fps <= 1000 else 25.0
        self._frames: Deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="darknet_py-live", daemon=True)
        self._thread.start()

    # ---- the reading thread --------------------------------------------------------------------
    def _read(self) -> None:
        index = 0
        try:
            while not self._stop.is_set():
                ok, frame = self._cap.read()
                if not ok:
                    if not self._reopen():
                        break
                    continue
                self._hand_out((index, frame, None))
                index += 1
        except BaseException as e:  # handed to the consumer, who raises it
            self._hand_out(e)
        finally:
            self._cap.release()
            self._hand_out(_END)

    def _reopen(self) -> bool:
        """After a failed read: reopen with back-off. False (and end_reason set) when the source ended."""
        self._cap.release()
        for attempt in range(1, self.reconnect + 1):
            delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
            self.on_message(f"{self.name}: no frame; reconnecting in {delay:.1f} s "
                            f"(attempt {attempt} of {self.reconnect})")
            if self._stop.wait(delay):
                return False
            self._cap = _quiet_open(self.spec)
            if self._cap.isOpened():
                self.reconnects += 1
                self.on_message(f"{self.name}: reconnected")
                return True
            self._cap.release()
        tried = f" after {self.reconnect} reconnection attempt(s)" if self.reconnect else ""
        self.end_reason = f"{self.name}: the stream ended (no more frames{tried})"
        return False

    def _hand_out(self, item: Any) -> None:
        with self._cond:
            if item is not _END and not isinstance(item, BaseException):
                if self.drop:
                    if self._frames:  # the consumer has not taken the previous frame: it is stale
                        self._frames.clear()
                        self.dropped += 1
                else:
                    while len(self._frames) >= BUFFERED_FRAMES and not self._stop.is_set():
                        self._cond.wait(0.1)
            self._frames.append(item)
            self._cond.notify_all()

    # ---- the consumer --------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Tuple[int, np.ndarray, None]]:
        while True:
            with self._cond:
                while not self._frames:
                    self._cond.wait()
                item = self._frames.popleft()
                self._cond.notify_all()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        # a read of a stalled stream can block until its timeout: the thread then releases the
        # capture itself (it is a daemon: it never holds the process open)
        self._thread.join(timeout=2)

    def __enter__(self) -> "LiveReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
