"""chart.png: the training chart Darknet draws (image_opencv.cpp draw_train_chart / draw_train_loss).

Average loss (blue) against iterations on the left axis, mAP in percent (red, with its value
written beside each point) on the right axis, the iteration axis running to max_batches. Drawn
with OpenCV alone, so there is no plotting dependency. Darknet fixes the loss axis at
max_chart_loss (20); we scale it to the average losses of the last 80% of the iterations (the
first ones' spike is clipped at the top), so a loss that starts at 400 and ends at 0.5 still
shows its tail.
"""
from __future__ import annotations

import math
import time
from typing import List, Optional, Tuple

import numpy as np

from .checkpoint import save_image_atomic
from .phase_hook import phase

WIDTH, HEIGHT = 1000, 700
LEFT, RIGHT, TOP, BOTTOM = 70, 70, 40, 80  # margins around the plot area
BLUE, RED, GRAY, BLACK, LIGHT = (200, 80, 0), (0, 0, 230), (150, 150, 150), (0, 0, 0), (225, 225, 225)


def _nice_ceiling(v: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is >= v (axis ends at round numbers)."""
    if v <= 0 or not math.isfinite(v):
        return 1.0
    p = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if m * p >= v * (1 - 1e-9):
            return m * p
    return 10 * p


class Chart:
    """Collects (iteration, loss, avg loss) and (iteration, mAP) points and draws them.

    save() redraws and writes the file atomically; maybe_save() does so at most every `interval`
    seconds, so calling it every iteration costs nothing measurable."""

    def __init__(self, path: str, max_batches: int, title: str = "", interval: float = 5.0,
                 iou_thresh: float = 0.5) -> None:
        self.path, self.max_batches, self.title = path, max(1, int(max_batches)), title
        self.interval, self.iou_thresh = interval, iou_thresh
        self.losses: List[Tuple[int, float, float]] = []
        self.maps: List[Tuple[int, float]] = []
        self._saved = 0.0

    def add_loss(self, iteration: int, loss: float, avg_loss: float) -> None:
        if math.isfinite(loss) and math.isfinite(avg_loss):
            self.losses.append((int(iteration), float(loss), float(avg_loss)))

    def add_map(self, iteration: int, mean_ap: float) -> None:
        self.maps.append((int(iteration), float(mean_ap)))

    # ---- drawing ---------------------------------------------------------------------------
    def _loss_axis_max(self) -> float:
        if not self.losses:
            return 1.0
        avg = np.array([a for _, _, a in self.losses])
        tail = avg[len(avg) // 5:]  # the last 80%: the first iterations' spike is drawn clipped at the top
        return _nice_ceiling(float(np.max(tail)) * 1.1)

    def draw(self, status: str = "") -> np.ndarray:
        import cv2

        img = np.full((HEIGHT, WIDTH, 3), 255, np.uint8)
        x0, x1, y0, y1 = LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM
        font = cv2.FONT_HERSHEY_SIMPLEX
        lmax = self._loss_axis_max()

        def px(it: float) -> int:
            return int(round(x0 + (x1 - x0) * min(it, self.max_batches) / self.max_batches))

        def py_loss(v: float) -> int:
            return int(round(y1 - (y1 - y0) * min(max(v, 0.0), lmax) / lmax))

        def py_map(v: float) -> int:
            return int(round(y1 - (y1 - y0) * min(max(v, 0.0), 1.0)))

        # grid and axis labels: 10 divisions each way
        for k in range(11):
            y = int(round(y1 - (y1 - y0) * k / 10))
            x = int(round(x0 + (x1 - x0) * k / 10))
            cv2.line(img, (x0, y), (x1, y), LIGHT, 1)
            cv2.line(img, (x, y0), (x, y1), LIGHT, 1)
            cv2.putText(img, f"{lmax * k / 10:.3g}", (5, y + 4), font, 0.4, BLUE, 1, cv2.LINE_AA)
            cv2.putText(img, f"{k * 10}%", (x1 + 8, y + 4), font, 0.4, RED, 1, cv2.LINE_AA)
            cv2.putText(img, str(int(round(self.max_batches * k / 10))), (x - 12, y1 + 18), font, 0.4, BLACK, 1,
                        cv2.LINE_AA)
        cv2.rectangle(img, (x0, y0), (x1, y1), GRAY, 1)
        cv2.putText(img, "Loss", (5, y0 - 15), font, 0.5, BLUE, 1, cv2.LINE_AA)
        cv2.putText(img, f"mAP@{self.iou_thresh:g}", (x1 - 10, y0 - 15), font, 0.5, RED, 1, cv2.LINE_AA)
        cv2.putText(img, "Iteration number", ((x0 + x1) // 2 - 60, y1 + 40), font, 0.5, BLACK, 1, cv2.LINE_AA)

        if self.losses:
            pts = np.array([(px(i), py_loss(a)) for i, _, a in self.losses], np.int32)
            cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, BLUE, 2, cv2.LINE_AA)
        if self.maps:
            pts = np.array([(px(i), py_map(m)) for i, m in self.maps], np.int32)
            if len(pts) > 1:
                cv2.polylines(img, [pts.reshape(-1, 1, 2)], False, RED, 2, cv2.LINE_AA)
            for (i, m), (x, y) in zip(self.maps, pts):
                cv2.circle(img, (int(x), int(y)), 3, RED, -1, cv2.LINE_AA)
                cv2.putText(img, f"{100 * m:.0f}%", (int(x) - 12, int(y) - 8), font, 0.4, RED, 1, cv2.LINE_AA)

        if not status and self.losses:
            it, _, avg = self.losses[-1]
            status = f"current avg loss = {avg:.4f}    iteration = {it}"
            if self.maps:
                status += f"    last mAP = {100 * self.maps[-1][1]:.2f}%    best = {100 * max(m for _, m in self.maps):.2f}%"
        cv2.putText(img, status, (x0, HEIGHT - 15), font, 0.5, BLACK, 1, cv2.LINE_AA)
        if self.title:
            cv2.putText(img, self.title, (x0 + 60, y0 - 15), font, 0.5, BLACK, 1, cv2.LINE_AA)
        return img

    def save(self, status: str = "") -> str:
        self._saved = time.monotonic()
        phase("chart", "draw")
        return save_image_atomic(self.path, self.draw(status))

    def maybe_save(self) -> Optional[str]:
        if time.monotonic() - self._saved >= self.interval:
            return self.save()
        return None
