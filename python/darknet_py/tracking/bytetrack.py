"""ByteTrack with every track's Kalman filter in one set of arrays: `trackers`' ByteTrackTracker
(Roboflow, Apache-2.0) step for step, at a fraction of its cost.

Why our own: the library keeps one Python object with its own 8x8 Kalman filter per track, so a
frame costs a dozen small NumPy calls per track (predict and update): 2 to 3 ms at 50 objects, of
which the association (IoU and scipy's linear_sum_assignment) is under a tenth. Here the predict and
the update are a few NumPy calls over all tracks at once (docs/video_tracking.md has the figures).
The algorithm and its arithmetic are the library's, at its fixed frame rate (no timestamps):

- state (x1, y1, x2, y2) and their velocities; constant-velocity transition; measurement noise
  0.1 I, process noise 0.01 I, initial covariance I (ByteTrackTracklet's tuning); Joseph-form update.
  With these, the 8x8 covariance is four equal 2x2 blocks, one per coordinate and its velocity (no
  term couples two coordinates), so each track keeps one 2x2 block: its four entries, computed as
  the library's 8x8 products compute them (the lower corner apart from the upper one).
- Two stages: detections at or above `high_conf_det_threshold` are matched to every track, then
  the others to the tracks left over, each by scipy's linear_sum_assignment maximising IoU (float32,
  as supervision's box_iou_batch returns it), a pair kept at IoU >= `minimum_iou_threshold`.
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

Q = 0.01   # process noise, per state variable
R = 0.1    # measurement noise, per coordinate


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of each (x1, y1, x2, y2) box of `a` with each of `b`, in float64, returned as float32 (0
    where the union is empty): supervision's box_iou_batch, whose figures the library matches on."""
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    np.clip(iw, 0.0, None, out=iw)
    np.clip(ih, 0.0, None, out=ih)
    inter = iw * ih
    area_a, area_b = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None] - inter
    out = np.zeros(inter.shape, np.float32)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def _assign(a: np.ndarray, b: np.ndarray, threshold: float) -> Tuple[np.ndarray, np.ndarray]:
    """(rows of a, rows of b) of the optimal IoU assignment of boxes a to boxes b, pairs below
    `threshold` left out, in scipy's order."""
    if len(a) == 0 or len(b) == 0:
        return _NONE, _NONE
    from scipy.optimize import linear_sum_assignment

    iou = iou_matrix(a, b)
    rows, cols = linear_sum_assignment(iou, maximize=True)
    keep = iou[rows, cols] >= threshold
    return rows[keep], cols[keep]


_NONE = np.empty(0, np.intp)


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
        # per track, one row of each: few arrays make few NumPy calls (a call costs more than its
        # arithmetic at these sizes)
        # x1, y1, x2, y2, their velocities, and the 2x2 covariance block by rows: (box, box),
        # (box, velocity), (velocity, box), (velocity, velocity)
        self.track = np.zeros((0, 12))
        # frames since the last match, matches in a row, id (-1 until confirmed)
        self.count = np.zeros((0, 3), np.int64)
        self._next_id = 0

    @property
    def box(self) -> np.ndarray:
        return self.track[:, :4]

    @property
    def ids(self) -> np.ndarray:
        return self.count[:, 2]

    def _predict(self) -> None:
        t = self.track
        t[:, :4] += t[:, 4:8]
        a, b, c, d = t[:, 8], t[:, 9], t[:, 10], t[:, 11]
        bd = b + d
        t[:, 8] = ((a + c) + bd) + Q
        t[:, 9] = bd
        t[:, 10] = c + d
        t[:, 11] = d + Q
        n = self.count
        n[n[:, 0] > 0, 1] = 0
        n[:, 0] += 1

    def _correct(self, rows: np.ndarray, boxes: np.ndarray) -> None:
        """Kalman update of tracks `rows` with their measured boxes (Joseph form)."""
        t = self.track[rows]
        a, b, c, d = t[:, 8], t[:, 9], t[:, 10], t[:, 11]
        inv_s = 1.0 / (a + R)
        kp, kv = a * inv_s, c * inv_s
        innovation = boxes - t[:, :4]
        ikp = 1.0 - kp
        ap00, ap01, ap10, ap11 = ikp * a, ikp * b, -kv * a + c, -kv * b + d
        cov = (ap00 * ikp + kp * R * kp, (ap00 * -kv + ap01) + kp * R * kv,
               ap10 * ikp + kv * R * kp, (ap10 * -kv + ap11) + kv * R * kv)
        t[:, :4] += kp[:, None] * innovation
        t[:, 4:8] += kv[:, None] * innovation
        t[:, 8], t[:, 9], t[:, 10], t[:, 11] = cov
        self.track[rows] = t
        n = self.count
        n[rows, 0] = 0
        n[rows, 1] += 1
        # ids for the tracks just matched often enough, in the order of the matches
        new = rows[(n[rows, 1] >= self.minimum_consecutive_frames) & (n[rows, 2] == -1)]
        if len(new):
            n[new, 2] = np.arange(self._next_id, self._next_id + len(new))
            self._next_id += len(new)

    def update(self, xyxy: np.ndarray, confidence: np.ndarray) -> np.ndarray:
        boxes = np.asarray(xyxy, np.float32).reshape(-1, 4).astype(np.float64)
        confidence = np.asarray(confidence, np.float32).reshape(-1)
        out = np.full(len(boxes), -1, np.int64)
        if len(self.track) == 0 and len(boxes) == 0:
            return out
        self._predict()
        predicted = self.track[:, :4].copy()
        is_high = confidence >= self.high_conf_det_threshold
        high = np.flatnonzero(is_high)
        # 1. confident detections against every track; 2. the others against the tracks left over
        rows, cols = _assign(predicted, boxes[high], self.minimum_iou_threshold)
        dets = high[cols]
        if len(high) < len(boxes) and len(rows) < len(predicted):
            low = np.flatnonzero(~is_high)
            free = np.ones(len(predicted), bool)
            free[rows] = False
            left = np.flatnonzero(free)
            r2, c2 = _assign(predicted[left], boxes[low], self.minimum_iou_threshold)
            # a track's update leaves the other associations as they were: both stages are corrected
            # at once, the first stage's matches first (their ids come first)
            rows, dets = np.concatenate([rows, left[r2]]), np.concatenate([dets, low[c2]])
        if len(rows):
            self._correct(rows, boxes[dets])
            out[dets] = self.count[rows, 2]
        # new tracks from the confident detections no track took
        unclaimed = is_high & (confidence >= self.track_activation_threshold)
        unclaimed[high[cols]] = False
        spawn = np.flatnonzero(unclaimed)
        if len(spawn):
            n = len(spawn)
            fresh = np.zeros((n, 12))
            fresh[:, :4] = boxes[spawn]
            fresh[:, 8] = fresh[:, 11] = 1.0
            self.track = np.concatenate([self.track, fresh])
            self.count = np.concatenate([self.count, np.repeat([[0, 1, -1]], n, axis=0)])
        # drop the tracks lost too long, and the unconfirmed ones that missed this frame
        n = self.count
        alive = (n[:, 0] <= self.maximum_frames_without_update) & (
            (n[:, 2] != -1) | (n[:, 1] >= self.minimum_consecutive_frames) | (n[:, 0] == 0))
        if not alive.all():
            self.track, self.count = self.track[alive], self.count[alive]
        return out
