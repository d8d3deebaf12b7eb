"""Counting tracked objects: across a line (`--count-line x1,y1,x2,y2`) and into and out of a
polygon zone (`--count-zone x1,y1,x2,y2,x3,y3,...`), per class and direction.

Each counter follows each track's centre (the centre of its box). A line counts a track when its
centre goes from one side of the line to the other while passing between the line's two ends:
"left" and "right" name the side it crossed to, as seen looking from (x1, y1) towards (x2, y2)
on the screen (y grows downwards: for a line drawn left to right, "right" is below it). A zone
counts an "entry" when a track's centre goes from outside the polygon to inside, an "exit" the
other way; a track first seen inside is not an entry. A centre within `margin` pixels of the
line (or the zone's border) keeps the side it had, so a box that jitters on the line is not
counted again and again. The class counted is the detection's class at that frame.

The same counters run on ground truth (count_rows: MOTChallenge rows), so a test compares the
counts of tracked detections with the counts of the true paths.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

Point = Tuple[float, float]
# (track id, class name, centre x, centre y)
Item = Tuple[int, str, float, float]


def parse_points(text: str, minimum: int) -> List[Point]:
    """'x1,y1,x2,y2,...' -> [(x1, y1), (x2, y2), ...]; at least `minimum` points."""
    try:
        values = [float(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise ValueError(f"expected numbers x1,y1,x2,y2,... got {text!r}") from None
    if len(values) % 2 or len(values) < 2 * minimum:
        raise ValueError(f"expected at least {minimum} points as x1,y1,x2,y2,... (an even count of numbers), "
                         f"got {text!r}")
    return [(values[i], values[i + 1]) for i in range(0, len(values), 2)]


class _Counter:
    kind = ""
    directions: Tuple[str, str] = ("", "")

    def __init__(self, points: Sequence[Point], margin: float) -> None:
        self.points = [(float(x), float(y)) for x, y in points]
        self.margin = float(margin)
        self._state: Dict[int, int] = {}  # track id -> its side (+1 / -1)
        self.counts: Dict[str, Dict[str, int]] = {}
        self.total = {d: 0 for d in self.directions}

    def _side(self, x: float, y: float) -> Tuple[int, bool]:
        """(+1 / -1 / 0 within the margin, whether a change of side here counts)."""
        raise NotImplementedError

    def update(self, items: Iterable[Item]) -> List[Tuple[int, str, str]]:
        """Feeds one frame's tracks; returns the events of this frame: (track id, class, direction)."""
        events = []
        for tid, cls, x, y in items:
            side, counts_here = self._side(x, y)
            if side == 0:
                continue
            before = self._state.get(tid)
            self._state[tid] = side
            if before is None or before == side or not counts_here:
                continue
            direction = self.directions[0] if side > 0 else self.directions[1]
            per_class = self.counts.setdefault(cls, {d: 0 for d in self.directions})
            per_class[direction] += 1
            self.total[direction] += 1
            events.append((tid, cls, direction))
        return events

    def to_dict(self) -> dict:
        return {"type": self.kind, "points": [list(p) for p in self.points],
                "counts": {c: dict(v) for c, v in sorted(self.counts.items())}, "total": dict(self.total)}


class LineCounter(_Counter):
    """Counts tracks whose centre crosses the segment (x1, y1)-(x2, y2); directions "right" and "left"."""

    kind = "line"
    directions = ("right", "left")

    def __init__(self, points: Sequence[Point], margin: float = 2.0) -> None:
        if len(points) != 2:
            raise ValueError(f"a count line has 2 points, got {len(points)}")
        super().__init__(points, margin)
        (x1, y1), (x2, y2) = self.points
        self._d = np.array([x2 - x1, y2 - y1])
        self._len = float(np.hypot(*self._d))
        if self._len == 0:
            raise ValueError("a count line needs two different points")

    def _side(self, x: float, y: float) -> Tuple[int, bool]:
        (x1, y1), _ = self.points
        dx, dy = self._d
        cross = (dx * (y - y1) - dy * (x - x1)) / self._len  # signed distance, > 0: right of p1 -> p2
        along = (dx * (x - x1) + dy * (y - y1)) / self._len ** 2  # 0..1 between the ends
        if abs(cross) <= self.margin:
            return 0, False
        return (1 if cross > 0 else -1), 0 <= along <= 1


class ZoneCounter(_Counter):
    """Counts tracks whose centre enters ("entry") or leaves ("exit") a polygon of 3 or more points."""

    kind = "zone"
    directions = ("entry", "exit")

    def __init__(self, points: Sequence[Point], margin: float = 2.0) -> None:
        if len(points) < 3:
            raise ValueError(f"a count zone has at least 3 points, got {len(points)}")
        super().__init__(points, margin)
        self._contour = np.array(self.points, np.float32).reshape(-1, 1, 2)

    def _side(self, x: float, y: float) -> Tuple[int, bool]:
        import cv2

        dist = cv2.pointPolygonTest(self._contour, (float(x), float(y)), True)  # > 0 inside
        if abs(dist) <= self.margin:
            return 0, False
        return (1 if dist > 0 else -1), True


def make_counters(lines: Sequence[str] = (), zones: Sequence[str] = (), margin: float = 2.0) -> List[_Counter]:
    return ([LineCounter(parse_points(t, 2), margin) for t in lines]
            + [ZoneCounter(parse_points(t, 3), margin) for t in zones])


def detection_items(detections) -> List[Item]:
    """The tracked detections of a frame as counter items (untracked ones are left out)."""
    return [(d.track_id, d.class_name, d.x + d.w / 2, d.y + d.h / 2) for d in detections if d.track_id is not None]


def count_rows(rows: np.ndarray, counters: Sequence[_Counter], names: Optional[Sequence[str]] = None) -> None:
    """Runs counters over MOTChallenge rows (frame, id, left, top, width, height, conf, class, ...),
    frame by frame, as they run over tracked detections."""
    rows = np.asarray(rows, float)
    for frame in np.unique(rows[:, 0]):
        sel = rows[rows[:, 0] == frame]
        items = [(int(r[1]), names[int(r[7])] if names else str(int(r[7])), r[2] + r[4] / 2, r[3] + r[5] / 2)
                 for r in sel]
        for c in counters:
            c.update(items)
