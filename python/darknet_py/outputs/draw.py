"""Drawing detections on BGR images: a box per object in a per-class colour, a readable label."""
from __future__ import annotations

import math
from collections import deque
from typing import Deque, Dict, Iterable, Tuple

import cv2
import numpy as np

from ..network import Detection

Color = Tuple[int, int, int]

# Darknet's palette and its class -> colour walk (image.c get_color), so boxes keep the colours
# Darknet users know: class c sits at offset c*123457 % classes along magenta-blue-cyan-green-yellow-red.
_PALETTE = ((1, 0, 1), (0, 0, 1), (0, 1, 1), (0, 1, 0), (1, 1, 0), (1, 0, 0))
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def _channel(c: int, x: int, maximum: int) -> float:
    ratio = x / maximum * 5
    i, j = math.floor(ratio), math.ceil(ratio)
    ratio -= i
    return (1 - ratio) * _PALETTE[i][c] + ratio * _PALETTE[j][c]


def class_color(class_id: int, classes: int = 80) -> Color:
    """The BGR colour of a class, as Darknet picks it."""
    classes = max(int(classes), 1)
    offset = class_id * 123457 % classes
    red, green, blue = (_channel(c, offset, classes) for c in (2, 1, 0))
    return tuple(min(255, int(v * 256)) for v in (blue, green, red))  # type: ignore[return-value]


def _text_color(bg: Color) -> Color:
    # ITU-R 601 luma of a BGR colour: black text on light labels, white on dark ones
    luma = 0.114 * bg[0] + 0.587 * bg[1] + 0.299 * bg[2]
    return (0, 0, 0) if luma > 140 else (255, 255, 255)


def _style(image: np.ndarray) -> Tuple[int, float, int]:
    """Line thickness, font scale and text thickness that read well at this image size."""
    h = image.shape[0]
    return max(1, round(h * 0.004)), max(0.4, h / 1200), max(1, round(h / 600))


def draw_label(image: np.ndarray, text: str, x: int, y: int, bg: Color, above: bool = True) -> None:
    """Draws `text` on a filled `bg` rectangle whose bottom-left is (x, y) (or top-left when the
    label does not fit above), kept inside the image. Draws in place."""
    _, scale, thick = _style(image)
    (tw, th), base = cv2.getTextSize(text, _FONT, scale, thick)
    pad = max(2, thick + 1)
    bw, bh = tw + 2 * pad, th + base + pad
    H, W = image.shape[:2]
    x = int(min(max(0, x), max(0, W - bw)))
    top = int(y - bh) if above and y - bh >= 0 else int(y)
    top = min(max(0, top), max(0, H - bh))
    cv2.rectangle(image, (x, top), (x + bw, top + bh), bg, cv2.FILLED)
    cv2.putText(image, text, (x + pad, top + pad + th), _FONT, scale, _text_color(bg), thick, cv2.LINE_AA)


def draw_detections(image: np.ndarray, detections: Iterable[Detection], classes: int = 80,
                    inplace: bool = False) -> np.ndarray:
    """Returns `image` (BGR uint8) with a box and a "name 0.87" label per detection. The caller's
    array is left untouched unless inplace=True."""
    if not isinstance(image, np.ndarray) or image.ndim != 3 or image.shape[2] != 3:
        raise TypeError("draw_detections expects a HxWx3 BGR image")
    out = image if inplace else image.copy()
    line, _, _ = _style(out)
    # draw the most confident last, so its label is on top where labels overlap
    for d in sorted(detections, key=lambda d: d.confidence):
        color = class_color(d.class_id, classes)
        x0, y0 = int(round(d.x)), int(round(d.y))
        x1, y1 = int(round(d.x + d.w)), int(round(d.y + d.h))
        cv2.rectangle(out, (x0, y0), (x1, y1), color, line)
        track = "" if getattr(d, "track_id", None) is None else f" #{d.track_id}"
        draw_label(out, f"{d.class_name}{track} {d.confidence:.2f}", x0 - line // 2, y0 - line // 2, color)
    return out


def track_color(track_id: int) -> Color:
    """A colour per track id (Darknet's walk over 32 hues), so neighbouring ids differ."""
    return class_color(track_id * 7, 32)


class Trails:
    """The last `length` centres of each track, drawn as a line in the track's colour. Tracks not seen
    for `length` frames are forgotten."""

    def __init__(self, length: int = 30) -> None:
        self.length = max(1, int(length))
        self._points: Dict[int, Deque[Tuple[int, int]]] = {}
        self._last: Dict[int, int] = {}
        self._frame = 0

    def update(self, detections: Iterable[Detection]) -> None:
        self._frame += 1
        for d in detections:
            if d.track_id is None:
                continue
            pts = self._points.setdefault(d.track_id, deque(maxlen=self.length))
            pts.append((int(round(d.x + d.w / 2)), int(round(d.y + d.h / 2))))
            self._last[d.track_id] = self._frame
        for tid in [t for t, f in self._last.items() if self._frame - f >= self.length]:
            del self._points[tid], self._last[tid]

    def draw(self, image: np.ndarray) -> None:
        # half the boxes' thickness: OpenCV's anti-aliased lines cost about 8 times more at 2 px than at
        # 1 px (0.5 ms against 0.07 ms for 9 trails on a 640x480 frame), a tenth of the frame's detection
        line = max(1, _style(image)[0] // 2)
        for tid, pts in self._points.items():
            if len(pts) > 1:
                cv2.polylines(image, [np.array(pts, np.int32).reshape(-1, 1, 2)], False, track_color(tid), line,
                              cv2.LINE_AA)


def draw_counters(image: np.ndarray, counters) -> None:
    """Each count line or zone with its totals beside it, in place."""
    line, _, _ = _style(image)
    for c in counters:
        pts = np.round(np.array(c.points)).astype(np.int32)
        color = (0, 255, 255) if c.kind == "line" else (255, 0, 255)
        cv2.polylines(image, [pts.reshape(-1, 1, 2)], c.kind == "zone", color, line + 1, cv2.LINE_AA)
        text = " ".join(f"{k} {v}" for k, v in c.total.items())
        draw_label(image, text, int(pts[:, 0].min()), int(pts[:, 1].min()), color)


def draw_fps(image: np.ndarray, fps: float) -> None:
    """Writes "FPS: 12.3" in the bottom-left corner (labels sit on the boxes' tops), in place."""
    draw_label(image, f"FPS: {fps:.1f}", 0, image.shape[0], (32, 32, 32))
