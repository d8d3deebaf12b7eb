"""Tracking detections from frame to frame with Roboflow's `trackers` library (Apache-2.0), an
optional extra: `pip install "darknet-engine[track]"`.

Why that library (the measurements are in docs/video_tracking.md): it has SORT, ByteTrack and
OC-SORT behind one `update(detections)` call, is under our own licence, is actively maintained and
was the fastest; its ByteTrack (the default) was the most consistent across synth clips, OC-SORT
the best through the occlusion of the seed-0 clip. `supervision`'s sv.ByteTrack (MIT) is the same
team's older tracker, gone from supervision 0.31 (it moved into `trackers`); `norfair` (BSD-3)
pins NumPy below 2 (no wheel for CPython 3.13) and scored lowest. boxmot is AGPL-3.0: not an
option for an Apache-2.0 package.

Track ids count from 1 (MOTChallenge's habit; the library counts from 0). A detection that no
confirmed track has claimed yet (a new object's first frames: `minimum_consecutive_frames`) keeps
track_id None.
"""
from __future__ import annotations

import dataclasses
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


def _library():
    try:
        import supervision
        import trackers
    except ImportError as e:
        raise TrackerMissing(f"tracking needs the trackers library ({e.name} is not installed): "
                             f"{INSTALL_HINT}") from None
    return trackers, supervision


def tracker_class(name: str):
    if name not in TRACKERS:
        raise ValueError(f"unknown tracker {name!r} (known: {', '.join(TRACKERS)})")
    trackers, _ = _library()
    return getattr(trackers, TRACKERS[name])


def tracker_defaults(name: str) -> Dict[str, Any]:
    """The library's default for each parameter this tracker takes."""
    sig = inspect.signature(tracker_class(name).__init__)
    return {k: p.default for k, p in sig.parameters.items() if k in PARAMETERS}


class Tracker:
    """Gives detections track ids, frame after frame. `params` are the library's parameters
    (lost_track_buffer, track_activation_threshold, minimum_iou_threshold, high_conf_det_threshold,
    minimum_consecutive_frames; None or absent: the library's default); frame_rate scales
    lost_track_buffer (given in frames at 30 fps, as the library takes it)."""

    def __init__(self, name: str = DEFAULT_TRACKER, frame_rate: float = 30.0, **params: Any) -> None:
        cls = tracker_class(name)
        _, self._sv = _library()
        given = {k: v for k, v in params.items() if v is not None}
        accepted = tracker_defaults(name)
        wrong = sorted(set(given) - set(accepted))
        if wrong:
            raise ValueError(f"tracker {name} takes no {', '.join(wrong)} (it takes {', '.join(accepted)})")
        self.name = name
        self.params = {**accepted, **given}
        self._tracker = cls(frame_rate=float(frame_rate), **given)

    def update(self, detections: List["Detection"]) -> List["Detection"]:
        """The same detections, in the same order, each with its track_id (None: not yet confirmed)."""
        n = len(detections)
        xyxy = np.array([(d.x, d.y, d.x + d.w, d.y + d.h) for d in detections], np.float32).reshape(n, 4)
        sv_dets = self._sv.Detections(xyxy=xyxy, confidence=np.array([d.confidence for d in detections], np.float32),
                                      class_id=np.array([d.class_id for d in detections], int),
                                      data={"index": np.arange(n)})
        out = self._tracker.update(sv_dets)
        ids: Dict[int, int] = {}
        if len(out) and out.tracker_id is not None:
            ids = {int(i): int(t) for i, t in zip(out.data["index"], out.tracker_id) if t >= 0}
        return [dataclasses.replace(d, track_id=ids[i] + 1) if i in ids else d for i, d in enumerate(detections)]


def make_tracker(spec: Optional[str], frame_rate: float, params: Optional[Dict[str, Any]] = None) -> Optional[Tracker]:
    return None if not spec else Tracker(spec, frame_rate, **(params or {}))
