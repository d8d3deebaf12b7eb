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
                reconnect: int = 5, info: Optional[dict] = None) -> Iterator[np.ndarray]:
    """Every frame of `source` in order: an image is one frame, a video all its decodable frames,
    a live source (camera index or stream URL) its frames until it ends (see live.LiveReader).
    `info`, where given, holds the current video's "clip" (its path or the stream's name, None
    for images) and "fps" while its frames are handed out."""
    info = info if info is not None else {}
    from .live import LiveReader
    from .sources import is_video, read_image, resolve_source
    from .video import FrameReader

    spec = str(source) if isinstance(source, int) else os.fspath(source)
    src = resolve_source(spec)
    if src.live is not None:
        with LiveReader(src.live, drop=drop, reconnect=reconnect,
                        on_message=lambda text: warnings.warn(text, stacklevel=3)) as reader:
            info.update(clip=spec, fps=reader.fps)
            for _, frame, _ in reader:
                yield frame
        return
    for line in src.missing + [f"{p}: not an image or video (by its extension)" for p in src.ignored]:
        warnings.warn(f"skipped: {line}", stacklevel=3)
    for path in src.files:
        if is_video(path):
            with FrameReader(path) as reader:
                info.update(clip=path, fps=reader.fps)
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
        info.update(clip=None, fps=30.0)
        yield image


def stream_detections(net: "Network", source: Union[int, str, "os.PathLike[str]"], thresh: float = 0.25,
                      nms: float = 0.45, letterbox: bool = False, max_frames: Optional[int] = None,
                      drop: bool = True, track: Union[bool, str, None] = None,
                      track_params: Optional[dict] = None) -> Iterator[Tuple[np.ndarray, List["Detection"]]]:
    """(frame, detections) per frame of `source`, at most `max_frames` of them (see Network.stream).
    track: True (ByteTrack) or a tracker's name gives each detection its track_id (see
    darknet_py.tracking); a new tracker starts with each video, the images of a folder share one."""
    if max_frames is not None and max_frames < 1:
        raise ValueError(f"max_frames must be at least 1, got {max_frames}")
    make = None
    if track:
        from ..tracking.tracker import DEFAULT_TRACKER, Tracker, tracker_class

        name = DEFAULT_TRACKER if track is True else str(track)
        tracker_class(name)  # a missing library or a wrong name fails before the first frame is read

        def make(fps: float) -> Tracker:
            return Tracker(name, fps, **(track_params or {}))
    info: dict = {}
    frames = iter_frames(source, drop, info=info)
    tracker, clip = None, object()
    try:
        for count, frame in enumerate(frames, 1):
            dets = net.detect(frame, thresh, nms, letterbox)
            if make is not None:
                if tracker is None or info.get("clip") != clip:  # a new video: a new tracker
                    tracker, clip = make(info.get("fps") or 30.0), info.get("clip")
                dets = tracker.update(dets)
            yield frame, dets
            if max_frames is not None and count >= max_frames:
                return
    finally:
        frames.close()  # releases a capture now, not when the garbage collector gets to it
