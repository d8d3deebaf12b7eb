"""Video I/O with OpenCV, decoding and encoding in background threads.

The network's forward pass releases the GIL, and so do OpenCV's read/write, so decoding frame
i+1 and encoding frame i-1 overlap with detecting frame i. The queues are bounded, so memory
stays flat however long the video is.
"""
from __future__ import annotations

import math
import os
import queue
import tempfile
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple

import cv2
import numpy as np

from ..exit_codes import OutputError
from ..outputs.files import TempVideo

# mp4v (MPEG-4 part 2) is what every opencv-python wheel can encode into .mp4/.mov/.mkv; .avi gets
# MJPG, which OpenCV encodes itself even without FFmpeg (Darknet's demo writes MJPG too).
_FOURCC = {".mp4": "mp4v", ".mov": "mp4v", ".mkv": "mp4v", ".m4v": "mp4v", ".avi": "MJPG"}
_END = object()
MAX_BAD_RUN = 50  # this many undecodable frames in a row end the video (the rest is taken as lost)



def _writer_failure(path: str, fps: float, size: Tuple[int, int]) -> str:
    """Why OpenCV's writer did not open: the frame size, the frame rate, or the codec itself. OpenCV
    only says no, so the same codec is tried on a scratch file at 64x64 and 25 fps to tell them apart."""
    fourcc, ext = fourcc_for(path), os.path.splitext(path)[1] or "no extension"

    def opens(fps_: float, size_: Tuple[int, int]) -> bool:
        with tempfile.TemporaryDirectory() as d:
            w = cv2.VideoWriter(os.path.join(d, "probe" + os.path.splitext(path)[1]),
                                cv2.VideoWriter_fourcc(*fourcc), fps_, size_)
            ok = w.isOpened()
            w.release()
            return ok

    if not opens(25.0, (64, 64)):
        return f"codec {fourcc} unavailable for {ext} in this OpenCV"
    if not opens(25.0, size):
        hint = "; .avi (MJPG) takes any size" if fourcc != "MJPG" else ""
        return f"OpenCV's {fourcc} encoder refuses {size[0]}x{size[1]} frames{hint}"
    if not opens(fps, (64, 64)):
        return f"OpenCV's {fourcc} encoder refuses {fps:g} frames per second"
    return f"OpenCV's {fourcc} encoder did not open for {size[0]}x{size[1]} frames at {fps:g} fps"

class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def fourcc_for(path: str) -> str:
    """The codec used to write a video at `path`, chosen by its extension."""
    return _FOURCC.get(os.path.splitext(path)[1].lower(), "mp4v")


def writable_video_path(path: str) -> str:
    """`path` when OpenCV writes its container with a codec every build has (see _FOURCC), else
    `path` + ".mp4": the annotated copy of clip.webm / .mpg / .ts / .wmv / .gif is clip.webm.mp4
    (those containers need codecs some builds lack, and GIF is not a video OpenCV writes)."""
    return path if os.path.splitext(path)[1].lower() in _FOURCC else path + ".mp4"


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
        try:
            if os.path.getsize(path) == 0:
                raise ValueError(f"{path}: empty video file (0 bytes)")
        except OSError as e:
            raise FileNotFoundError(f"{path}: cannot read the video ({e.strerror})") from None
        self._cap = cv2.VideoCapture(path)
        if not self._cap.isOpened():
            raise ValueError(f"{path}: cannot open the video (unsupported or corrupt file)")
        fps = self._cap.get(cv2.CAP_PROP_FPS)
        # some containers report 0 or nonsense; 25 is what players assume
        self.fps = float(fps) if math.isfinite(fps) and 0 < fps <= 1000 else 25.0
        n = int(self._cap.get(cv2.CAP_PROP_FRAME_COUNT))
        self.frame_count: Optional[int] = n if n > 0 else None  # from the header: an estimate
        self.size = (int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        self.bad_frames: List[int] = []  # positions of frames that could not be decoded (skipped)
        self._prepare = prepare
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=max(1, queue_size))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._decode, name="darknet_py-decode", daemon=True)
        self._thread.start()

    def _decode(self) -> None:
        try:
            index = 0
            bad_run: List[int] = []
            while not self._stop.is_set():
                ok, frame = self._cap.read()
                if not ok:
                    # a damaged frame fails to decode but the ones after it may not: go on while the
                    # header says there are more, up to a run of MAX_BAD_RUN failures
                    if self.frame_count is not None and index < self.frame_count and len(bad_run) < MAX_BAD_RUN:
                        bad_run.append(index)
                        index += 1
                        continue
                    break
                self.bad_frames += bad_run
                bad_run = []
                prepared = self._prepare(frame) if self._prepare is not None else None
                if not _put(self._queue, (index, frame, prepared), self._stop):
                    break
                index += 1
            # frames the header announces that never decoded (the end of the file is damaged)
            if self.frame_count is not None and not self._stop.is_set():
                self.bad_frames += list(range(bad_run[0] if bad_run else index, self.frame_count))
        except BaseException as e:  # handed to the consumer, who raises it
            _put(self._queue, _Failure(e), self._stop)
        finally:
            self._cap.release()
            _put(self._queue, _END, self._stop)

    def bad_frames_text(self) -> str:
        """The skipped frames in one line, e.g. `frame(s) 16-21, 30 (7 of 31) could not be decoded: skipped`."""
        runs: List[List[int]] = []
        for i in self.bad_frames:
            if runs and i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        spans = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
        total = f" of {self.frame_count}" if self.frame_count else ""
        return f"frame(s) {spans} ({len(self.bad_frames)}{total}) could not be decoded: skipped"

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
    first frame (its size is the frame's: rotated phone videos decode with swapped sides) under a
    temporary name beside `path` (outputs.TempVideo) and finalized and renamed to `path` by
    close(). Used as a context manager, an error discards the temporary file (a previous `path`
    stays as it was); Ctrl-C finalizes the frames written so far and renames them into place, a
    complete, playable video of the part that was done."""

    def __init__(self, path: str, fps: float, queue_size: int = 8) -> None:
        self.path, self.fps = path, fps
        self.size: Optional[Tuple[int, int]] = None
        self.frames = 0
        self._writer: Optional[cv2.VideoWriter] = None
        self._temp: Optional[TempVideo] = None
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=max(1, queue_size))
        self._stop = threading.Event()
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None

    def _open(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        temp = TempVideo(self.path)
        writer = cv2.VideoWriter(temp.tmp, cv2.VideoWriter_fourcc(*fourcc_for(self.path)), self.fps, (w, h))
        if not writer.isOpened():
            temp.discard()
            raise OutputError(f"{self.path}: cannot write this video ({_writer_failure(self.path, self.fps, (w, h))})")
        self._writer, self._temp, self.size = writer, temp, (w, h)
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

    def close(self, keep: bool = True) -> None:
        """Writes the queued frames and finalizes the file; renames it to `path` when `keep` and no
        frame failed to encode, else removes it (idempotent)."""
        if self._thread is not None:
            _put(self._queue, _END, self._stop)
            self._thread.join()
            self._thread = None
        if self._writer is not None:
            self._writer.release()
            self._writer = None
        if self._temp is not None:
            temp, self._temp = self._temp, None
            if keep and self._error is None:
                temp.commit()
            else:
                temp.discard()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> "FrameWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        # a video cut short by Ctrl-C is still a complete file of the frames done; one cut by an
        # error is not what the user asked for
        self.close(keep=exc_type is None or issubclass(exc_type, KeyboardInterrupt))
