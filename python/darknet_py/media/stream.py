"""`Network.stream(source)`: (frame, detections) over any source `darknet_py detect` takes.

    for frame, detections in net.stream(0):            # camera 0, until Ctrl-C or the camera stops
        cv2.imshow("live", darknet_py.annotate(frame, detections))
        if cv2.waitKey(1) == ord("q"):
            break                                       # leaving the loop releases the camera

Frames are BGR uint8 as OpenCV decodes them; the caller may keep or modify them (each is a new
array). Files that cannot be read (in a folder, glob or list) are skipped with a warning.
"""
from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Iterator, List, Optional, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    from ..network import Detection, Network


def iter_frames(source: Union[int, str, "os.PathLike[str]"], drop: bool = True,
                reconnect: int = 5) -> Iterator[np.ndarray]:
    """Every frame of `source` in order: an image is one frame, a video all its decodable frames,
    a live source (camera index or stream URL) its frames until it ends (see live.LiveReader)."""
    from .live import LiveReader
    from .sources import is_video, read_image, resolve_source
    from .video import FrameReader

    spec = str(source) if isinstance(source, int) else os.fspath(source)
    src = resolve_source(spec)
    if src.live is not None:
        with LiveReader(src.live, drop=drop, reconnect=reconnect,
                        on_message=lambda text: warnings.warn(text, stacklevel=3)) as reader:
            for _, frame, _ in reader:
                yield frame
        return
    for line in src.missing + [f"{p}: not an image or video (by its extension)" for p in src.ignored]:
        warnings.warn(f"skipped: {line}", stacklevel=3)
    for path in src.files:
        if is_video(path):
            with FrameReader(path) as reader:
                for _, frame, _ in reader:
                    yield frame
            continue
        try:
            image = read_image(path)
        except (OSError, ValueError) as e:
            if len(src.files) == 1:
                raise
            warnings.warn(f"skipped: {e}", stacklevel=3)
            continue
        yield image


def stream_detections(net: "Network", source: Union[int, str, "os.PathLike[str]"], thresh: float = 0.25,
                      nms: float = 0.45, letterbox: bool = False, max_frames: Optional[int] = None,
                      drop: bool = True) -> Iterator[Tuple[np.ndarray, List["Detection"]]]:
    """(frame, detections) per frame of `source`, at most `max_frames` of them (see Network.stream)."""
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, got {max_frames}")
    frames = iter_frames(source, drop)
    try:
        for count, frame in enumerate(frames, 1):
            yield frame, net.detect(frame, thresh, nms, letterbox)
            if max_frames is not None and count >= max_frames:
                return
    finally:
        frames.close()  # releases a capture now, not when the garbage collector gets to it
