"""ByteTrack: `trackers`' ByteTrackTracker (Roboflow, Apache-2.0) step for step, at a fraction of
its cost. The engine holds the tracks and does each frame's arithmetic (src-lib/tracking/bytetrack.h:
Kalman predict and update, IoU, ids, new and lost tracks); scipy's linear_sum_assignment solves the
assignments, called from here between the core's steps.

Why our own: the library keeps one Python object with its own 8x8 Kalman filter per track, so a
frame costs a dozen small NumPy calls per track: 1.5 to 3 ms at 50 objects, of which the association
(IoU and linear_sum_assignment) is under a tenth. A NumPy port with all tracks in a few arrays took
0.18 ms alone, but two to five times that between the forward passes of a video (whose work leaves
its dozens of NumPy calls out of the caches); the core makes a frame a handful of calls
(docs/video_tracking.md has the figures). The algorithm and its arithmetic are the library's, at its
fixed frame rate (no timestamps):

- state (x1, y1, x2, y2) and their velocities; constant-velocity transition; measurement noise
  0.1 I, process noise 0.01 I, initial covariance I (ByteTrackTracklet's tuning); Joseph-form update.
  With these, the 8x8 covariance is four equal 2x2 blocks, one per coordinate and its velocity (no
  term couples two coordinates), so each track keeps one 2x2 block: its four entries, computed as
  the library's 8x8 products compute them (the lower corner apart from the upper one).
- Two stages: detections at or above `high_conf_det_threshold` are matched to every track, then
  the others to the tracks left over, each by linear_sum_assignment maximising IoU (float32, as
  supervision's box_iou_batch returns it), a pair kept at IoU >= `minimum_iou_threshold`. Where each
  track overlaps one detection at most and each detection one track, every optimal assignment holds
  exactly those pairs: the core takes them without the solver (which releases the GIL, and in a
  video's threaded pipeline taking it back cost about 2 ms a call).
- A track gets its id when it has been matched `minimum_consecutive_frames` frames in a row (a
  missed frame starts the count again), in the order the matches come; ids count from 0.
- An unmatched confident detection at or above `track_activation_threshold` starts a track.
- A track is dropped once unmatched for more than `lost_track_buffer` frames (at 30 fps: scaled
  by the frame rate), or at once while it has no id and missed a frame.

src-test/test_bytetrack.py checks that the ids and the boxes equal the library's, frame by frame.
"""
from __future__ import annotations

import math
from typing import Tuple

import numpy as np


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each (x1, y1, x2, y2) box of `a` with each of `b`, in float64, returned as float32 (0
    where the union is empty): supervision's box_iou_batch, whose figures the library matches on."""
    from .. import _core

    return _core.iou_matrix(np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4))


def _assign(iou: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the assignment of most IoU, in scipy's order (the core keeps the pairs at
    or above the threshold)."""
    if iou.size == 0:
        return _NONE, _NONE
    from scipy.optimize import linear_sum_assignment

    return linear_sum_assignment(iou, maximize=True)


_NONE = np.empty(0, np.int64)


class ByteTrack:
    """update(xyxy, confidence) -> one id per detection (from 0; -1: no confirmed track). The
    parameters and their defaults are the library's ByteTrackTracker's."""

    def __init__(self, lost_track_buffer: int = 30, frame_rate: float = 30.0, track_activation_threshold: float = 0.7,
                 minimum_consecutive_frames: int = 2, minimum_iou_threshold: float = 0.1,
                 high_conf_det_threshold: float = 0.6) -> None:
        if lost_track_buffer < 0:
            raise ValueError("lost_track_buffer must be >= 0")
        if not math.isfinite(frame_rate) or frame_rate <= 0:
            raise ValueError("frame_rate must be a finite positive value")
        self.maximum_frames_without_update = (0 if lost_track_buffer == 0
                                              else max(1, math.ceil(frame_rate / 30.0 * lost_track_buffer)))
        self.track_activation_threshold = track_activation_threshold
        self.minimum_consecutive_frames = minimum_consecutive_frames
        self.minimum_iou_threshold = minimum_iou_threshold
        self.high_conf_det_threshold = high_conf_det_threshold
        self.reset()

    def reset(self) -> None:
        from .. import _core

        self._core = _core.ByteTrackCore(self.maximum_frames_without_update, self.minimum_consecutive_frames,
                                         self.minimum_iou_threshold, self.high_conf_det_threshold,
                                         self.track_activation_threshold)

    @property
    def box(self) -> np.ndarray:
        """The live tracks' boxes (x1, y1, x2, y2)."""
        return self._core.boxes

    @property
    def ids(self) -> np.ndarray:
        """The live tracks' ids (-1: not confirmed)."""
        return self._core.ids

    def update(self, xyxy: np.ndarray, confidence: np.ndarray) -> np.ndarray:
        core = self._core
        # 1. confident detections against every track; 2. the others against the tracks left over
        boxes = np.asarray(xyxy, np.float32).reshape(-1, 4)
        rows, cols = _assign(core.begin(boxes, np.asarray(confidence, np.float32)))
        rows, cols = _assign(core.second(rows, cols))
        return core.finish(rows, cols)
