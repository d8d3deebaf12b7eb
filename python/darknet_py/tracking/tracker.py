"""Tracking detections from frame to frame: ByteTrack (the default) is our own port of Roboflow's
`trackers` ByteTrackTracker (bytetrack.py: the engine's core and scipy's assignment); SORT and
OC-SORT are the library's own (Apache-2.0). Both come with the optional extra: `pip install
"darknet-engine[track]"`.

Why that library (the measurements are in docs/video_tracking.md): it has SORT, ByteTrack and
OC-SORT behind one `update(detections)` call, is under our own licence and is actively maintained;
its ByteTrack was the most consistent across synth clips, OC-SORT the best through the occlusion of
the seed-0 clip. `supervision`'s sv.ByteTrack (MIT) is the same team's older tracker, gone from
supervision 0.31 (it moved into `trackers`); `norfair` (BSD-3) pins NumPy below 2 (no wheel for
CPython 3.13) and scored lowest. boxmot is AGPL-3.0: not an option for an Apache-2.0 package.
Why ByteTrack is ours: the library runs one Kalman filter object per track, 1.5 to 3 ms a frame at 50
objects; the port runs them all in the engine, with the same ids (src-test/test_bytetrack.py).
`Tracker(name, library=True)` runs the library's own ByteTrack.

Track ids count from 1 (MOTChallenge's habit; the library counts from 0). A detection that no
confirmed track has claimed yet (a new object's first frames: `minimum_consecutive_frames`) keeps
track_id None.
"""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import numpy as np

if TYPE_CHECKING:
    from ..network import Detection

# our name -> the library's class
TRACKERS = {"bytetrack": "ByteTrackTracker", "sort": "SORTTracker", "ocsort": "OCSORTTracker"}
DEFAULT_TRACKER = "bytetrack"
INSTALL_HINT = 'pip install "darknet-engine[track]"'
# the parameters the command line exposes, by the library's names (each tracker takes a subset)
PARAMETERS = ("lost_track_buffer", "track_activation_threshold", "minimum_iou_threshold",
              "high_conf_det_threshold", "minimum_consecutive_frames")


class TrackerMissing(RuntimeError):
    """The tracker library is not installed."""


def _missing(e: ImportError) -> TrackerMissing:
    return TrackerMissing(f"tracking needs the trackers library ({e.name} is not installed): {INSTALL_HINT}")


def _library():
    try:
        import supervision
        import trackers
    except ImportError as e:
        raise _missing(e) from None
    return trackers, supervision


def tracker_class(name: str, library: bool = False):
    """The class that runs tracker `name`: ours for ByteTrack (unless `library`), else the library's."""
    if name not in TRACKERS:
        raise ValueError(f"unknown tracker {name!r} (known: {', '.join(TRACKERS)})")
    if name == "bytetrack" and not library:
        try:
            import scipy.optimize  # noqa: F401  (the association)
        except ImportError as e:
            raise _missing(e) from None
        from .bytetrack import ByteTrack

        return ByteTrack
    trackers, _ = _library()
    return getattr(trackers, TRACKERS[name])


def tracker_defaults(name: str, library: bool = False) -> Dict[str, Any]:
    """The default of each parameter this tracker takes."""
    sig = inspect.signature(tracker_class(name, library).__init__)
    return {k: p.default for k, p in sig.parameters.items() if k in PARAMETERS}


class Tracker:
    """Gives detections track ids, frame after frame. `params` are the library's parameters
    (lost_track_buffer, track_activation_threshold, minimum_iou_threshold, high_conf_det_threshold,
    minimum_consecutive_frames; None or absent: the default); frame_rate scales lost_track_buffer
    (given in frames at 30 fps, as the library takes it). library=True: the library's own ByteTrack."""

    def __init__(self, name: str = DEFAULT_TRACKER, frame_rate: float = 30.0, library: bool = False,
                 **params: Any) -> None:
        cls = tracker_class(name, library)
        given = {k: v for k, v in params.items() if v is not None}
        accepted = tracker_defaults(name, library)
        wrong = sorted(set(given) - set(accepted))
        if wrong:
            raise ValueError(f"tracker {name} takes no {', '.join(wrong)} (it takes {', '.join(accepted)})")
        self.name = name
        self.params = {**accepted, **given}
        self._tracker = cls(frame_rate=float(frame_rate), **given)
        self._own = name == "bytetrack" and not library

    def update(self, detections: List["Detection"]) -> List["Detection"]:
        """The same detections, in the same order, each with its track_id (None: not yet confirmed)."""
        n = len(detections)
        xyxy = np.array([(d.x, d.y, d.x + d.w, d.y + d.h) for d in detections], np.float32).reshape(n, 4)
        confidence = np.array([d.confidence for d in detections], np.float32)
        if self._own:
            ids = self._tracker.update(xyxy, confidence).tolist()
        else:
            ids = self._library_ids(xyxy, confidence, detections)
        return [d if t < 0 else _with_track_id(d, t + 1) for d, t in zip(detections, ids)]

    def _library_ids(self, xyxy: np.ndarray, confidence: np.ndarray, detections: List["Detection"]) -> List[int]:
        """The library's tracker id of each detection (-1: none), from its sv.Detections in and out."""
        _, sv = _library()
        n = len(detections)
        sv_dets = sv.Detections(xyxy=xyxy, confidence=confidence,
                                class_id=np.array([d.class_id for d in detections], int), data={"index": np.arange(n)})
        out = self._tracker.update(sv_dets)
        ids = [-1] * n
        if len(out) and out.tracker_id is not None:
            for i, t in zip(out.data["index"].tolist(), out.tracker_id.tolist()):
                ids[i] = t
        return ids


def _with_track_id(d: "Detection", track_id: int) -> "Detection":
    """A copy of frozen `d` with its track_id: dataclasses.replace runs __init__ field by field (a few
    microseconds a detection, a fifth of the tracker's time at 50 objects); a copy of __dict__ does not."""
    new = object.__new__(type(d))
    new.__dict__.update(d.__dict__, track_id=track_id)
    return new


def make_tracker(spec: Optional[str], frame_rate: float, params: Optional[Dict[str, Any]] = None) -> Optional[Tracker]:
    return None if not spec else Tracker(spec, frame_rate, **(params or {}))
