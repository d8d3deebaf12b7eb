"""Training throughput as a user sees it: images per second and the share of the time the training
step waited for the loader, so that the log says which side limits the run (train.py)."""
from __future__ import annotations

import os

# below this share of waiting, the device (or the CPU engine) is the limit, not the data
WAIT_WORTH_MENTIONING = 0.05


def default_train_workers(device: str) -> int:
    """--workers' default: on the CPU min(4, cores) (the engine wants the cores); on a GPU
    min(8, cores - 1) (one core stays with the training loop), enough for yolov4-tiny's step."""
    cores = os.cpu_count() or 1
    return max(1, min(4, cores)) if device.startswith("cpu") else max(1, min(8, cores - 1))


def use_processes(loader_kind: str, device: str, workers: int) -> bool:
    """Whether the loader runs in processes: asked for, or "auto" on a GPU with several workers (a GPU
    step is fast enough for the GIL to cap threads; on the CPU the engine wants the cores itself)."""
    if loader_kind not in ("auto", "threads", "processes"):
        raise ValueError(f"loader kind must be auto, threads or processes, got {loader_kind!r}")
    if loader_kind == "auto":
        return workers > 1 and not device.startswith("cpu")
    return loader_kind == "processes"


class ThroughputMeter:
    """Iteration times and data waits. The first iteration (the loader starting, the device's
    first-call work) is left out of the totals once there are others."""

    def __init__(self) -> None:
        self.iterations = 0
        self.first = (0, 0.0, 0.0)
        self.images, self.seconds, self.wait = 0, 0.0, 0.0

    def add(self, images: int, seconds: float, wait: float) -> None:
        self.iterations += 1
        if self.iterations == 1:
            self.first = (images, seconds, wait)
        else:
            self.images, self.seconds, self.wait = self.images + images, self.seconds + seconds, self.wait + wait

    def _totals(self):
        return (self.images, self.seconds, self.wait) if self.iterations > 1 else self.first

    @property
    def images_per_second(self) -> float:
        images, seconds, _ = self._totals()
        return images / seconds if seconds > 0 else 0.0

    @property
    def wait_share(self) -> float:
        _, seconds, wait = self._totals()
        return min(1.0, wait / seconds) if seconds > 0 else 0.0

    def line(self) -> str:
        return f"{self.images_per_second:.0f} images/s, {100 * self.wait_share:.0f}% waiting for data"

    def summary(self, loader: str) -> str:
        text = (f"throughput: {self.images_per_second:.1f} images/s over {max(1, self.iterations - 1)} iterations, "
                f"{100 * self.wait_share:.1f}% of the time waiting for data (loader: {loader})")
        if self.wait_share >= WAIT_WORTH_MENTIONING:
            text += f"; the loader limits training: raise --workers (this machine has {os.cpu_count()} cores)"
        else:
            text += "; the training step limits training, not the data"
        return text
